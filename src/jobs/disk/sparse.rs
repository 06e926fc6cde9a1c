//! One pass over a raw disk image that copies it sparsely and hashes it.
//!
//! The source's holes (found with `SEEK_DATA`/`SEEK_HOLE`) are not read: they are hashed as
//! zeros from memory and stay holes in the copy. Within its data, blocks that are all zeros
//! (free space the guest zeroed before sealing) are not written either, so the copy allocates
//! only what holds data. Hashing runs on its own thread, fed the buffers the copy has just
//! written, so the pass goes at the speed of the slower of the two, not of their sum.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use sha2::{Digest, Sha256};

use crate::jobs::bundle_prep::checksum;
use crate::jobs::extents::next_data;

/// The allocation unit whose all-zero blocks are left as holes (a filesystem block).
pub const BLOCK: usize = 4096;
/// How much is read, written and hashed at a time.
pub const CHUNK: usize = 1 << 20;
/// Buffers in flight between the copy and the hasher.
const BUFFERS: usize = 4;

/// What one pass found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copied {
    /// SHA-256 of the whole image, holes as zeros (hex).
    pub sha256: String,
    /// The image's length in bytes.
    pub size: u64,
    /// Bytes written to the target (the rest of it is holes).
    pub data_bytes: u64,
}

enum Piece {
    /// `len` bytes of a buffer the hasher returns when done.
    Data(Vec<u8>, usize),
    Zeros(u64),
}

/// Copies `source` into `target` (truncated first) and hashes it in the same pass.
pub fn copy(source: &File, target: &File) -> io::Result<Copied> {
    let size = source.metadata()?.len();
    target.set_len(0)?;
    target.set_len(size)?;
    let (to_hasher, pieces) = sync_channel::<Piece>(BUFFERS);
    let (recycle, buffers) = sync_channel::<Vec<u8>>(BUFFERS);
    for _ in 0..BUFFERS {
        recycle
            .send(vec![0; CHUNK])
            .expect("the receiver is held here");
    }
    let hasher = std::thread::Builder::new()
        .name("disk-hash".into())
        .spawn(move || hash(pieces, recycle))?;
    let copied = copy_extents(source, target, size, &to_hasher, &buffers);
    drop(to_hasher);
    let sha256 = hasher
        .join()
        .map_err(|_| io::Error::other("the hashing thread panicked"))?;
    let data_bytes = copied?;
    target.sync_all()?;
    Ok(Copied {
        sha256,
        size,
        data_bytes,
    })
}

/// Hashes the image alone, reading every byte (holes included) as a plain reader would: the
/// baseline the copy is measured against.
pub fn hash_only(source: &File) -> io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; CHUNK];
    let mut offset = 0;
    loop {
        let n = source.read_at(&mut buffer, offset)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        offset += n as u64;
    }
    Ok(checksum::hex(hasher))
}

fn hash(pieces: Receiver<Piece>, recycle: SyncSender<Vec<u8>>) -> String {
    static ZEROS: [u8; CHUNK] = [0; CHUNK];
    let mut hasher = Sha256::new();
    for piece in pieces {
        match piece {
            Piece::Data(buffer, len) => {
                hasher.update(&buffer[..len]);
                // The copy may have stopped on an error; then nobody takes it back.
                let _ = recycle.send(buffer);
            }
            Piece::Zeros(mut len) => {
                while len > 0 {
                    let n = len.min(CHUNK as u64) as usize;
                    hasher.update(&ZEROS[..n]);
                    len -= n as u64;
                }
            }
        }
    }
    checksum::hex(hasher)
}

/// Walks the source's data extents; returns the bytes written.
fn copy_extents(
    source: &File,
    target: &File,
    size: u64,
    to_hasher: &SyncSender<Piece>,
    buffers: &Receiver<Vec<u8>>,
) -> io::Result<u64> {
    let hasher_gone = || io::Error::other("the hashing thread stopped");
    let mut written = 0;
    let mut offset = 0;
    while offset < size {
        let (data, end) = next_data(source, offset, size)?;
        if data > offset {
            to_hasher
                .send(Piece::Zeros(data - offset))
                .map_err(|_| hasher_gone())?;
            offset = data;
        }
        while offset < end {
            let len = (end - offset).min(CHUNK as u64) as usize;
            let mut buffer = buffers.recv().map_err(|_| hasher_gone())?;
            source.read_exact_at(&mut buffer[..len], offset)?;
            written += write_nonzero(target, &buffer[..len], offset)?;
            to_hasher
                .send(Piece::Data(buffer, len))
                .map_err(|_| hasher_gone())?;
            offset += len as u64;
        }
    }
    Ok(written)
}

/// Writes the runs of blocks of `data` that are not all zeros, at `offset`; returns the bytes
/// written.
fn write_nonzero(target: &File, data: &[u8], offset: u64) -> io::Result<u64> {
    let mut written = 0;
    let mut run: Option<usize> = None;
    let mut at = 0;
    while at <= data.len() {
        let block = &data[at..data.len().min(at + BLOCK)];
        let zero = block.is_empty() || is_zero(block);
        match (run, zero) {
            (None, false) => run = Some(at),
            (Some(start), true) => {
                target.write_all_at(&data[start..at], offset + start as u64)?;
                written += (at - start) as u64;
                run = None;
            }
            _ => {}
        }
        if block.is_empty() {
            break;
        }
        at += block.len();
    }
    Ok(written)
}

fn is_zero(block: &[u8]) -> bool {
    let (words, tail) = block.as_chunks::<16>();
    words.iter().all(|w| u128::from_ne_bytes(*w) == 0) && tail.iter().all(|&b| b == 0)
}
