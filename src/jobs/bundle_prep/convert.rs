//! Step 5: the qcow2 converted to the raw golden disk under a temporary name, hashed, renamed.

use super::*;

/// The published raw disk.
pub(super) struct Disk {
    pub sha256: String,
    pub virtual_size: u64,
    pub convert: Duration,
    pub hash: Duration,
}

/// Converts `qcow2` to raw `golden/disk.img` via a temporary name; hashes it before the rename.
pub(super) async fn convert(
    qcow2: &Path,
    member: &str,
    golden: &Path,
    golden_bytes: u64,
) -> Result<Disk, PrepError> {
    let source = qemu_img::info_as(qcow2, "qcow2")
        .await
        .map_err(|e| PrepError::ConvertFailed(format!("inspecting {member}: {e}")))?;
    let external = source.external_files();
    if !external.is_empty() {
        return Err(PrepError::UnsafeMember {
            member: member.to_owned(),
            why: format!(
                "refers to other files that qemu-img would read ({})",
                external.join(", ")
            ),
        });
    }
    // The raw disk is as large as the virtual size: it must fit before a byte is written.
    if source.virtual_size > golden_bytes {
        return Err(PrepError::TooLarge {
            what: format!(
                "the virtual size of {member} ({} bytes)",
                source.virtual_size
            ),
            limit: golden_bytes,
            setting: "spec.goldenVolumeSize",
        });
    }
    tracing::info!(
        "converting {member} ({} bytes virtual) to raw {}",
        source.virtual_size,
        golden.join(DISK_FILE).display()
    );
    let partial = golden.join(PARTIAL_DISK_FILE);
    let result = convert_to(qcow2, &partial, golden).await;
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

async fn convert_to(qcow2: &Path, partial: &Path, golden: &Path) -> Result<Disk, PrepError> {
    let step = Instant::now();
    qemu_img::convert(qcow2, "qcow2", partial, "raw")
        .await
        .map_err(|e| PrepError::ConvertFailed(e.to_string()))?;
    let raw = qemu_img::info_as(partial, "raw")
        .await
        .map_err(|e| PrepError::ConvertFailed(format!("inspecting the converted disk: {e}")))?;
    let convert = step.elapsed();
    tracing::info!(
        "converted in {:.1}s; hashing the raw disk",
        convert.as_secs_f64()
    );

    let step = Instant::now();
    let path = partial.to_path_buf();
    let (sha256, len) =
        tokio::task::spawn_blocking(move || checksum::sha256_sparse_file(&path, true))
            .await
            .map_err(|e| PrepError::Storage {
                what: "hashing the raw disk".into(),
                source: std::io::Error::other(e),
            })?
            .map_err(PrepError::storage(format!("hashing {}", partial.display())))?;
    if len != raw.virtual_size {
        return Err(PrepError::ConvertFailed(format!(
            "the raw disk is {len} bytes, but qemu-img reports a virtual size of {}",
            raw.virtual_size
        )));
    }
    let hash = step.elapsed();
    tracing::info!(
        "raw disk: {len} bytes, sha256 {sha256} ({:.1}s)",
        hash.as_secs_f64()
    );

    let disk = golden.join(DISK_FILE);
    std::fs::rename(partial, &disk).map_err(PrepError::storage(format!(
        "renaming {} to {}",
        partial.display(),
        disk.display()
    )))?;
    sync_dir(golden)?;
    Ok(Disk {
        sha256,
        virtual_size: raw.virtual_size,
        convert,
        hash,
    })
}
