//! The capability blob in the accept's private data: magic "RDAB", version,
//! rkey, addr, length, little endian (32 bytes).

use crate::verbs::RemoteBuf;

const MAGIC: &[u8; 4] = b"RDAB";
const VERSION: u16 = 1;
/// Encoded size.
pub const LEN: usize = 32;

/// Encodes a capability.
pub fn encode(b: &RemoteBuf) -> [u8; LEN] {
    let mut out = [0u8; LEN];
    out[0..4].copy_from_slice(MAGIC);
    out[4..6].copy_from_slice(&VERSION.to_le_bytes());
    out[8..12].copy_from_slice(&b.rkey.to_le_bytes());
    out[16..24].copy_from_slice(&b.addr.to_le_bytes());
    out[24..32].copy_from_slice(&b.len.to_le_bytes());
    out
}

/// Decodes a capability; transports may pad private data, so trailing bytes are ignored.
pub fn decode(data: &[u8]) -> Result<RemoteBuf, String> {
    if data.len() < LEN {
        return Err(format!("private data is {} bytes, expected at least {LEN}", data.len()));
    }
    if &data[0..4] != MAGIC {
        return Err(format!(
            "private data does not start with \"RDAB\": {:02x?}",
            &data[0..4]
        ));
    }
    let version = u16::from_le_bytes([data[4], data[5]]);
    if version != VERSION {
        return Err(format!("capability blob version {version}, expected {VERSION}"));
    }
    let u64_at = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
    Ok(RemoteBuf {
        rkey: u32::from_le_bytes(data[8..12].try_into().expect("4 bytes")),
        addr: u64_at(16),
        len: u64_at(24),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_padding() {
        let b = RemoteBuf {
            addr: 0x7f00_dead_b000,
            rkey: 0x1234,
            len: 4096,
        };
        let mut padded = encode(&b).to_vec();
        padded.extend_from_slice(&[0; 20]);
        assert_eq!(decode(&padded), Ok(b));
        assert!(decode(&padded[..10]).is_err());
        padded[0] = b'X';
        assert!(decode(&padded).unwrap_err().contains("RDAB"));
    }
}
