//! The protobuf wire format, read with prost's own decoding functions: a message's fields one
//! at a time, borrowed from its bytes. A field whose wire type is not the one its number has in
//! the schema is an unknown field and skipped (as upb does); malformed bytes are an error.

use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};

/// The message's bytes are not valid protobuf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

impl From<prost::DecodeError> for Malformed {
    fn from(_: prost::DecodeError) -> Self {
        Malformed
    }
}

/// One field's value as the wire holds it.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    /// (no field read is a fixed32)
    Fixed32,
    Bytes(&'a [u8]),
    /// a (deprecated) group: skipped whole
    Group,
}

/// The fields of one message, in wire order.
pub struct Fields<'a> {
    buf: &'a [u8],
}

pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        Some(self.field())
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<(u32, Value<'a>), Malformed> {
        let (number, wire) = decode_key(&mut self.buf)?;
        let value = match wire {
            WireType::Varint => Value::Varint(decode_varint(&mut self.buf)?),
            WireType::SixtyFourBit => {
                let (head, rest) = self.buf.split_first_chunk::<8>().ok_or(Malformed)?;
                self.buf = rest;
                Value::Fixed64(u64::from_le_bytes(*head))
            }
            WireType::ThirtyTwoBit => {
                let (_, rest) = self.buf.split_first_chunk::<4>().ok_or(Malformed)?;
                self.buf = rest;
                Value::Fixed32
            }
            WireType::LengthDelimited => {
                let len = decode_varint(&mut self.buf)?;
                let len = usize::try_from(len).map_err(|_| Malformed)?;
                if len > self.buf.len() {
                    return Err(Malformed);
                }
                let (bytes, rest) = self.buf.split_at(len);
                self.buf = rest;
                Value::Bytes(bytes)
            }
            WireType::StartGroup => {
                skip_field(wire, number, &mut self.buf, DecodeContext::default())?;
                Value::Group
            }
            WireType::EndGroup => return Err(Malformed),
        };
        Ok((number, value))
    }
}

/// The values of a repeated varint field: one (unpacked) or a packed run.
pub fn varints(value: Value<'_>, out: &mut Vec<u64>) -> Result<(), Malformed> {
    match value {
        Value::Varint(v) => out.push(v),
        Value::Bytes(mut b) => {
            while !b.is_empty() {
                out.push(decode_varint(&mut b)?);
            }
        }
        _ => {}
    }
    Ok(())
}

/// The values of a repeated fixed64 field: one (unpacked) or a packed run.
pub fn fixed64s(value: Value<'_>, out: &mut Vec<u64>) -> Result<(), Malformed> {
    match value {
        Value::Fixed64(v) => out.push(v),
        Value::Bytes(b) => {
            if b.len() % 8 != 0 {
                return Err(Malformed);
            }
            out.extend(
                b.chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
            );
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_in_order_and_errors() {
        // field 1 varint 150, field 2 bytes "ab", field 3 fixed64 7, field 4 fixed32 9
        let mut msg = vec![0x08, 0x96, 0x01, 0x12, 2, b'a', b'b', 0x19];
        msg.extend(7u64.to_le_bytes());
        msg.push(0x25);
        msg.extend(9u32.to_le_bytes());
        let got: Vec<_> = fields(&msg).collect::<Result<_, _>>().unwrap();
        assert!(matches!(got[0], (1, Value::Varint(150))));
        assert!(matches!(got[1], (2, Value::Bytes(b"ab"))));
        assert!(matches!(got[2], (3, Value::Fixed64(7))));
        assert!(matches!(got[3], (4, Value::Fixed32)));
        // a length past the end, a field number 0, a lone end-group
        for bad in [&[0x12, 5, b'a'][..], &[0x00, 1], &[0x0c]] {
            assert!(fields(bad).any(|f| f.is_err()), "{bad:?}");
        }
    }

    #[test]
    fn packed_and_unpacked_repeated() {
        let mut out = Vec::new();
        varints(Value::Varint(3), &mut out).unwrap();
        varints(Value::Bytes(&[1, 0x96, 0x01]), &mut out).unwrap();
        assert_eq!(out, vec![3, 1, 150]);
        let mut out = Vec::new();
        let mut packed = 5u64.to_le_bytes().to_vec();
        packed.extend(6u64.to_le_bytes());
        fixed64s(Value::Bytes(&packed), &mut out).unwrap();
        assert_eq!(out, vec![5, 6]);
        assert!(fixed64s(Value::Bytes(&packed[..7]), &mut out).is_err());
    }
}
