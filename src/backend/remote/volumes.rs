//! Kernel, initrd and firmware as libvirt storage volumes on the host, named by content hash,
//! so nothing already there is sent again.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Context;

use super::*;

/// The storage pool that holds uploaded kernels, initrds and firmware.
pub const POOL: &str = "ocrig";

pub(super) const POOL_PATH: &str = "/var/lib/libvirt/images/ocrig";

/// Uploaded files per (URI, local path, size, mtime) in this process.
pub(super) static UPLOADED: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

/// Cost of making files present on remote hosts, for the note.
pub static UPLOADS: SetupStats = SetupStats(Mutex::new((0, 0.0)));

pub(super) fn content_name(local: &Path) -> anyhow::Result<String> {
    use sha2::Digest;
    let mut f = std::fs::File::open(local).with_context(|| format!("opening {}", local.display()))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let hex: String = h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect();
    let base = local
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "_")
        })
        .unwrap_or_default();
    Ok(format!("{hex}-{base}"))
}

pub(super) fn pool(conn: &virt::connect::Connect) -> anyhow::Result<virt::storage_pool::StoragePool> {
    use std::ffi::CString;
    use virt::storage_pool::StoragePool;
    let name = CString::new(POOL)?;
    // SAFETY: a valid connection pointer and a NUL-terminated name; a non-null result is a new
    // reference that StoragePool takes over.
    let p = unsafe { virt::sys::virStoragePoolLookupByName(conn.as_ptr(), name.as_ptr()) };
    if !p.is_null() {
        // SAFETY: see above.
        let p = unsafe { StoragePool::from_ptr(p) };
        if !p.is_active().unwrap_or(false) {
            p.create(0)
                .map_err(|e| anyhow::anyhow!("starting storage pool {POOL}: {}", e.message()))?;
        }
        return Ok(p);
    }
    let xml = format!("<pool type='dir'><name>{POOL}</name><target><path>{POOL_PATH}</path></target></pool>");
    let xml = CString::new(xml)?;
    // SAFETY: as above; flags 1 = VIR_STORAGE_POOL_CREATE_WITH_BUILD (make the directory).
    let p = unsafe { virt::sys::virStoragePoolCreateXML(conn.as_ptr(), xml.as_ptr(), 1) };
    anyhow::ensure!(
        !p.is_null(),
        "creating storage pool {POOL} at {POOL_PATH}: {}",
        virt::error::Error::last_error().message()
    );
    // SAFETY: a new reference.
    Ok(unsafe { StoragePool::from_ptr(p) })
}

/// Makes `local` present on the host behind `conn` as a storage volume named by its content
/// hash (uploading it only if no complete copy is there) and returns the volume's path there.
pub fn upload_volume(conn: &virt::connect::Connect, uri: &str, local: &Path) -> anyhow::Result<String> {
    let meta = std::fs::metadata(local).with_context(|| format!("reading {}", local.display()))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    let key = format!("{uri}\n{}\n{}\n{mtime:?}", local.display(), meta.len());
    if let Some(p) = UPLOADED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_default()
        .get(&key)
    {
        return Ok(p.clone());
    }
    let t0 = Instant::now();
    let name = content_name(local)?;
    let marker = format!("{name}.ok");
    let pool = pool(conn)?;
    let _ = pool.refresh(0);
    let vol = match (
        pool.lookup_storage_vol_by_name(&name),
        pool.lookup_storage_vol_by_name(&marker),
    ) {
        (Ok(v), Ok(_)) => v,
        (existing, _) => {
            // A volume without its marker is an upload that did not finish: replace it.
            if let Ok(v) = existing {
                let _ = v.delete(0);
            }
            let size = meta.len();
            let xml = format!(
                "<volume><name>{name}</name><capacity unit='bytes'>{size}</capacity><target><format type='raw'/></target></volume>"
            );
            let v = virt::storage_vol::StorageVol::create_xml(&pool, &xml, 0)
                .map_err(|e| anyhow::anyhow!("creating volume {name} in pool {POOL}: {}", e.message()))?;
            let stream = virt::stream::Stream::new(conn, 0)
                .map_err(|e| anyhow::anyhow!("opening a stream to {uri}: {}", e.message()))?;
            v.upload(&stream, 0, size, 0).map_err(|e| {
                anyhow::anyhow!("starting the upload of {}: {}", local.display(), e.message())
            })?;
            let mut f = std::fs::File::open(local)?;
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                let mut off = 0;
                while off < n {
                    let sent = stream
                        .send(&buf[off..n])
                        .map_err(|e| anyhow::anyhow!("uploading {}: {}", local.display(), e.message()))?;
                    off += sent.max(0) as usize;
                }
            }
            stream.finish().map_err(|e| {
                anyhow::anyhow!("finishing the upload of {}: {}", local.display(), e.message())
            })?;
            let mxml = format!(
                "<volume><name>{marker}</name><capacity unit='bytes'>0</capacity><target><format type='raw'/></target></volume>"
            );
            virt::storage_vol::StorageVol::create_xml(&pool, &mxml, 0)
                .map_err(|e| anyhow::anyhow!("marking volume {name} complete: {}", e.message()))?;
            UPLOADS.record(t0.elapsed());
            tracing::info!(
                "uploaded {} ({} bytes) to {uri} as volume {name} in {:.2} s",
                local.display(),
                size,
                t0.elapsed().as_secs_f64()
            );
            v
        }
    };
    let path = vol
        .path()
        .map_err(|e| anyhow::anyhow!("path of volume {name}: {}", e.message()))?;
    UPLOADED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_default()
        .insert(key, path.clone());
    Ok(path)
}
