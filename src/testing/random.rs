//! Seeded random draws for simulations in tests.

/// A standard normal draw (Box-Muller) from a seeded generator.
pub(crate) fn normal(rng: &mut fastrand::Rng) -> f64 {
    let (u, v) = (1.0 - rng.f64(), rng.f64());
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}
