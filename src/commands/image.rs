//! `ocrig image build`.

use crate::image::{self, ImageSpec, KernelSource};

pub fn build(kernel: &str, packages: Vec<String>) -> anyhow::Result<()> {
    let cache = image::cache_dir();
    let mut spec = ImageSpec::kernel(KernelSource::Debian(kernel.to_string()));
    spec.packages = crate::scenario::normalised_packages(&packages);
    let img = image::ensure(&spec, &cache)?;
    println!(
        "image {} ({}): kernel {} — {}; initrd {:.1} MiB; {}",
        img.id,
        if img.built { "built" } else { "cached" },
        img.kernel_release,
        img.kernel.display(),
        img.initrd_bytes as f64 / 1048576.0,
        if img.built {
            format!("built in {:.1} s", img.build_secs)
        } else {
            "reused".into()
        }
    );
    if !img.packages.is_empty() {
        println!(
            "  packages: {} with their dependencies, {} in all, {:.1} MiB unpacked",
            spec.packages.join(", "),
            img.packages.len(),
            img.packages_bytes as f64 / 1048576.0
        );
    }
    println!("  dir: {}", img.dir.display());
    Ok(())
}
