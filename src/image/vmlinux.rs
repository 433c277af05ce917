//! The uncompressed kernel inside a bzImage, for direct PVH boot.
//!
//! A bzImage is a real-mode setup stub plus a compressed payload; the payload decompresses to
//! the kernel's ELF `vmlinux` (stripped, with relocations appended). Booting that ELF directly
//! through its PVH entry point skips SeaBIOS's real-mode path and, above all, the in-guest
//! decompression, which under TCG takes seconds. The setup header (Linux boot protocol ≥ 2.08)
//! says where the payload is: `payload_offset` (from the start of the protected-mode code) and
//! `payload_length`. Debian compresses it with xz (`CONFIG_KERNEL_XZ`, x86 BCJ filter), so it is
//! decoded with liblzma; the 4 bytes after the xz stream (the decompressed size, for the in-kernel
//! decompressor) are ignored by the single-stream decoder.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader};

/// `XEN_ELFNOTE_PHYS32_ENTRY`: the 32-bit physical entry point QEMU's PVH loader jumps to.
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

/// Why a bzImage cannot be booted PVH (a user-facing sentence), or the extracted file.
pub type Extracted = std::result::Result<(), String>;

/// The compressed payload of a bzImage: (format name, bytes).
fn payload(image: &[u8]) -> std::result::Result<(&'static str, &[u8]), String> {
    if image.len() < 0x250 || image.get(0x202..0x206) != Some(b"HdrS") {
        return Err("not a bzImage (no HdrS setup header)".into());
    }
    let version = u16::from_le_bytes([image[0x206], image[0x207]]);
    if version < 0x208 {
        return Err(format!(
            "boot protocol {}.{:02} predates payload_offset (2.08)",
            version >> 8,
            version & 0xff
        ));
    }
    let setup_sects = match image[0x1f1] {
        0 => 4,
        n => n as usize,
    };
    let word = |at: usize| u32::from_le_bytes(image[at..at + 4].try_into().expect("4 bytes")) as usize;
    let start = (setup_sects + 1) * 512 + word(0x248);
    let bytes = image
        .get(start..start + word(0x24c))
        .ok_or("the setup header's payload lies outside the file")?;
    let format = match bytes {
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => "xz",
        [0x1f, 0x8b, ..] => "gzip",
        [0x28, 0xb5, 0x2f, 0xfd, ..] => "zstd",
        [0x5d, 0, 0, ..] => "lzma",
        [0x89, b'L', b'Z', b'O', ..] => "lzo",
        [0x04, 0x22, 0x4d, 0x18, ..] | [0x02, 0x21, 0x4c, 0x18, ..] => "lz4",
        [b'B', b'Z', b'h', ..] => "bzip2",
        _ => "unknown",
    };
    Ok((format, bytes))
}

/// The uncompressed kernel inside a bzImage whose payload is xz or gzip (to read its banner
/// and embedded config); why not otherwise.
pub fn decompressed(image: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let (format, compressed) = payload(image)?;
    match format {
        "xz" => unxz(compressed),
        "gzip" => {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(compressed), &mut out)
                .map_err(|e| format!("the gzip payload does not decompress: {e}"))?;
            Ok(out)
        }
        other => Err(format!(
            "the kernel payload is {other}-compressed; only xz and gzip are read"
        )),
    }
}

/// Decodes the one xz stream at the start of `data`, ignoring what follows it (the kernel
/// appends the decompressed size, which a reader expecting concatenated streams rejects).
fn unxz(data: &[u8]) -> std::result::Result<Vec<u8>, String> {
    use xz2::stream::{Action, Status, Stream};
    let mut stream = Stream::new_stream_decoder(u64::MAX, 0).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(data.len() * 8);
    loop {
        if out.len() == out.capacity() {
            out.reserve(out.capacity().max(1 << 20));
        }
        let consumed = stream.total_in() as usize;
        let produced = out.len();
        let status = stream
            .process_vec(&data[consumed..], &mut out, Action::Run)
            .map_err(|e| e.to_string())?;
        if status == Status::StreamEnd {
            return Ok(out);
        }
        let stuck = stream.total_in() as usize == consumed && out.len() == produced;
        if stuck && (consumed == data.len() || out.len() < out.capacity()) {
            return Err("truncated xz stream".into());
        }
    }
}

/// True when `elf` is an x86-64 ELF with a PVH entry note in a PT_NOTE segment.
pub fn has_pvh_note(data: &[u8]) -> std::result::Result<(), String> {
    let file = ElfFile64::<object::Endianness>::parse(data)
        .map_err(|e| format!("the decompressed payload is not a 64-bit ELF ({e})"))?;
    let endian = file.endian();
    for ph in file.elf_program_headers() {
        if ph.p_type(endian) != elf::PT_NOTE {
            continue;
        }
        let Ok(Some(mut notes)) = ph.notes(endian, data) else {
            continue;
        };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == b"Xen" && note.n_type(endian) == XEN_ELFNOTE_PHYS32_ENTRY {
                return Ok(());
            }
        }
    }
    Err("the kernel has no PVH entry note (built without CONFIG_PVH)".into())
}

/// Decompresses the vmlinux of `bzimage` into `dest` if it can be booted PVH; otherwise
/// returns why not (and writes nothing). I/O failures are errors.
pub fn extract(bzimage: &Path, dest: &Path) -> Result<Extracted> {
    let image = fs::read(bzimage).with_context(|| format!("reading {}", bzimage.display()))?;
    let (format, compressed) = match payload(&image) {
        Ok(p) => p,
        Err(why) => return Ok(Err(why)),
    };
    if format != "xz" {
        return Ok(Err(format!(
            "the kernel payload is {format}-compressed; only xz is unpacked"
        )));
    }
    let elf = match unxz(compressed) {
        Ok(elf) => elf,
        Err(e) => return Ok(Err(format!("the xz payload does not decompress: {e}"))),
    };
    if let Err(why) = has_pvh_note(&elf) {
        return Ok(Err(why));
    }
    let tmp = dest.with_extension(format!("tmp-{}", std::process::id()));
    let write = || -> Result<()> {
        let mut w = BufWriter::new(File::create(&tmp)?);
        w.write_all(&elf)?;
        w.into_inner()?.sync_all()?;
        fs::rename(&tmp, dest)?;
        Ok(())
    };
    write()
        .inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
        .with_context(|| format!("writing {}", dest.display()))?;
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::elf_with_notes;

    /// A bzImage-shaped file: setup header (protocol 2.15) and `payload` after 1 + 1 sectors.
    pub fn fake_bzimage(payload: &[u8]) -> Vec<u8> {
        let mut img = vec![0u8; 1024];
        img[0x1f1] = 1;
        img[0x202..0x206].copy_from_slice(b"HdrS");
        img[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
        img[0x248..0x24c].copy_from_slice(&0u32.to_le_bytes());
        img[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        img.extend(payload);
        img.extend((1234u32).to_le_bytes()); // the decompressed size the kernel appends
        img
    }

    pub fn xz(data: &[u8]) -> Vec<u8> {
        use std::io::Read;
        let mut out = Vec::new();
        xz2::read::XzEncoder::new(data, 1).read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn extracts_an_xz_payload_with_a_pvh_note() {
        let dir = tempfile::tempdir().unwrap();
        let elf = elf_with_notes(&[(b"Xen", 6), (b"Xen", XEN_ELFNOTE_PHYS32_ENTRY)]);
        let bz = dir.path().join("bzImage");
        fs::write(&bz, fake_bzimage(&xz(&elf))).unwrap();
        let out = dir.path().join("vmlinux");
        assert_eq!(extract(&bz, &out).unwrap(), Ok(()));
        assert_eq!(fs::read(&out).unwrap(), elf);
    }

    #[test]
    fn says_why_a_kernel_cannot_boot_pvh() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("vmlinux");
        let try_one = |bytes: Vec<u8>| {
            let bz = dir.path().join("bzImage");
            fs::write(&bz, bytes).unwrap();
            extract(&bz, &out).unwrap().unwrap_err()
        };
        let no_note = elf_with_notes(&[(b"Xen", 6), (b"GNU", XEN_ELFNOTE_PHYS32_ENTRY)]);
        assert!(try_one(fake_bzimage(&xz(&no_note))).contains("no PVH entry note"));
        assert!(try_one(fake_bzimage(&[0x1f, 0x8b, 8, 0])).contains("gzip-compressed"));
        assert!(try_one(fake_bzimage(&xz(b"not an elf"))).contains("not a 64-bit ELF"));
        assert!(try_one(vec![0u8; 4096]).contains("not a bzImage"));
        let mut truncated = fake_bzimage(&xz(&no_note));
        truncated[0x24c..0x250].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(try_one(truncated).contains("outside the file"));
        assert!(
            !out.exists(),
            "nothing is written for a kernel that cannot boot PVH"
        );
    }
}
