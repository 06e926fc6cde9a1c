//! Standard base64 (RFC 4648, with padding), the alphabet `base64 --decode` in the guest expects.
//!
//! Small enough to own: file writes to guests travel as base64 on a command line, and the
//! simulated guest decodes the same text.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Why a text is not base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("invalid base64 character {0:?}")]
    InvalidCharacter(char),
    #[error("invalid base64 length or padding")]
    InvalidLength,
}

/// Encodes `data` with padding and no line breaks.
pub fn encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

/// Decodes base64 text, ignoring ASCII whitespace (line breaks from `base64` or `echo`), as
/// GNU `base64 --decode` does.
pub fn decode(text: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    let mut padding = 0usize;
    let mut symbols = 0usize;
    for &c in text {
        if c.is_ascii_whitespace() {
            continue;
        }
        symbols += 1;
        if c == b'=' {
            padding += 1;
            continue;
        }
        if padding > 0 {
            // Data after padding.
            return Err(DecodeError::InvalidLength);
        }
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            other => return Err(DecodeError::InvalidCharacter(char::from(other))),
        };
        acc = (acc << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    if padding > 2 || !symbols.is_multiple_of(4) {
        return Err(DecodeError::InvalidLength);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_tail_length() {
        for len in 0..64usize {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let text = encode(&data);
            assert_eq!(text.len() % 4, 0);
            assert_eq!(decode(text.as_bytes()).unwrap(), data);
        }
    }

    #[test]
    fn matches_rfc4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(encode(plain.as_bytes()), encoded);
            assert_eq!(decode(encoded.as_bytes()).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn ignores_line_breaks_and_rejects_garbage() {
        assert_eq!(decode(b"Zm9v\nYmFy\n").unwrap(), b"foobar");
        assert_eq!(decode(b"Zm9v*"), Err(DecodeError::InvalidCharacter('*')));
        assert_eq!(decode(b"Zm9"), Err(DecodeError::InvalidLength));
        assert_eq!(decode(b"Zg==Zg=="), Err(DecodeError::InvalidLength));
    }
}
