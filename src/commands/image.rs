//! `ocrig image build`.

use crate::image::{self, ImageSpec, KernelSource};

pub fn build(kernel: &str) -> anyhow::Result<()> {
    let cache = image::cache_dir();
    let img = image::ensure(
        &ImageSpec {
            kernel: KernelSource::Debian(kernel.to_string()),
        },
        &cache,
    )?;
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
    println!("  dir: {}", img.dir.display());
    Ok(())
}
