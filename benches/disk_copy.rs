//! The disk Job's one-pass sparse copy (`guestcluster::jobs::disk::sparse::copy`) against two
//! baselines, on a sparse raw image of several GiB made for the run:
//! - hashing the same file alone (`sparse::hash_only`: every byte read, holes included);
//! - the two-tool pipeline, `cp --sparse=always` followed by `sha256sum` of the copy.
//!
//! `make bench-disk` (or `cargo bench --bench disk_copy -- [--gib 4] [--rounds 3]`). Prints each
//! method's median throughput (virtual bytes per second), the copy's ratio to each baseline, and
//! the copy's allocated size against the source's. The source is read once first so every run
//! sees it in the page cache. Figures are measurements, not assertions (`docs/performance.md`).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use guestcluster::jobs::disk::sparse;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

struct Args {
    gib: u64,
    rounds: usize,
}

fn args() -> Args {
    let mut args = Args { gib: 4, rounds: 3 };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--gib" => args.gib = value().parse().expect("--gib: a number"),
            "--rounds" => args.rounds = value().parse().expect("--rounds: a number"),
            // cargo bench passes `--bench`.
            _ => {}
        }
    }
    args
}

/// A disk like a sealed guest's: a fifth of it data (incompressible, in a few extents), a
/// twentieth allocated zeros (free space the guest zeroed), the rest never written.
fn make_image(path: &Path, size: u64) {
    let mut file = File::create(path).expect("create the image");
    file.set_len(size).expect("size the image");
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut chunk = vec![0u8; MIB as usize];
    let extents = 4;
    let data_per_extent = size / 5 / extents;
    for extent in 0..extents {
        file.seek(SeekFrom::Start(extent * (size / extents)))
            .expect("seek");
        for _ in 0..data_per_extent / MIB {
            for word in chunk.chunks_exact_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                word.copy_from_slice(&state.to_le_bytes());
            }
            file.write_all(&chunk).expect("write data");
        }
        // Zeroed free space right after the data.
        let zeros = vec![0u8; MIB as usize];
        for _ in 0..size / 20 / extents / MIB {
            file.write_all(&zeros).expect("write zeros");
        }
    }
    file.sync_all().expect("flush the image");
}

fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat").blocks() * 512
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let args = args();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("disk-bench");
    std::fs::create_dir_all(&dir).expect("bench directory");
    let source = dir.join("source.img");
    let target = dir.join("copy.img");
    let size = args.gib * GIB;
    println!(
        "making a {} GiB sparse raw image in {}",
        args.gib,
        dir.display()
    );
    make_image(&source, size);
    let expected = sparse::hash_only(&File::open(&source).unwrap()).expect("warm-up hash");

    let (mut hash_times, mut copy_times, mut tool_times) = (vec![], vec![], vec![]);
    let mut copy_allocated = 0;
    for round in 0..args.rounds {
        let start = Instant::now();
        let digest = sparse::hash_only(&File::open(&source).unwrap()).expect("hash");
        hash_times.push(start.elapsed());
        assert_eq!(digest, expected);

        let _ = std::fs::remove_file(&target);
        let start = Instant::now();
        let copied = sparse::copy(
            &File::open(&source).unwrap(),
            &File::create(&target).unwrap(),
        )
        .expect("copy");
        copy_times.push(start.elapsed());
        assert_eq!(copied.sha256, expected, "the copy's digest is the image's");
        copy_allocated = allocated(&target);

        let _ = std::fs::remove_file(&target);
        let start = Instant::now();
        let cp = Command::new("cp")
            .arg("--sparse=always")
            .arg(&source)
            .arg(&target)
            .status()
            .expect("run cp");
        let sum = Command::new("sha256sum")
            .arg(&target)
            .output()
            .expect("run sha256sum");
        tool_times.push(start.elapsed());
        assert!(cp.success() && sum.status.success());
        assert!(String::from_utf8_lossy(&sum.stdout).starts_with(&expected));
        println!("round {} done", round + 1);
    }
    let _ = std::fs::remove_file(&target);

    let rate = |t: Duration| size as f64 / t.as_secs_f64() / MIB as f64;
    let (hash, copy, tools) = (median(hash_times), median(copy_times), median(tool_times));
    println!();
    println!(
        "image: {} GiB virtual, {:.0} MiB allocated",
        args.gib,
        allocated(&source) as f64 / MIB as f64
    );
    println!("median of {} rounds, virtual MiB/s:", args.rounds);
    println!(
        "  hash only (read every byte + SHA-256)   {:>8.0}  ({hash:.2?})",
        rate(hash)
    );
    println!(
        "  sparse copy + SHA-256, one pass          {:>8.0}  ({copy:.2?})",
        rate(copy)
    );
    println!(
        "  cp --sparse=always, then sha256sum       {:>8.0}  ({tools:.2?})",
        rate(tools)
    );
    println!(
        "copy ÷ hash only: {:.2}×   copy ÷ cp+sha256sum: {:.2}×",
        hash.as_secs_f64() / copy.as_secs_f64(),
        tools.as_secs_f64() / copy.as_secs_f64()
    );
    println!(
        "allocated: copy {:.0} MiB ÷ source {:.0} MiB = {:.3}",
        copy_allocated as f64 / MIB as f64,
        allocated(&source) as f64 / MIB as f64,
        copy_allocated as f64 / allocated(&source) as f64
    );
    let _ = std::fs::remove_file(&source);
}
