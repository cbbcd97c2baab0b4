//! Reading Avro's binary encoding from a byte slice: zig-zag varints, lengths bounded by the
//! input that is left, and the conversions of logical values (decimal bytes, UUID text,
//! big-decimal) into the forms the columns store.
//!
//! Everything here returns a small [`FaultKind`] instead of the crate's `Error`, so that the
//! decoder's hot path passes a few bytes around; the decoder names the field when it turns a
//! fault into an `Error::Decode`.

use std::fmt;

/// Why a datum failed to decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// The datum ended inside a value.
    Eof,
    /// A varint longer than 10 bytes or beyond 64 bits.
    VarintOverflow,
    /// An `int` whose value does not fit 32 bits.
    IntOutOfRange(i64),
    /// A negative string, bytes or block length.
    NegativeLength(i64),
    /// A length or block count larger than the bytes left in the datum.
    LengthBeyondInput { len: i64, remaining: usize },
    /// A boolean byte other than 0 or 1.
    BadBool(u8),
    /// A string that is not UTF-8.
    BadUtf8,
    /// A union branch index outside the union.
    BadBranch { index: i64, branches: usize },
    /// An enum symbol index outside the enum.
    BadEnum { index: i64, symbols: usize },
    /// A uuid that is not 16 bytes nor the text of a UUID.
    BadUuid,
    /// A decimal whose two's complement value needs more than 128 bits.
    DecimalTooWide(usize),
    /// A decimal with more digits than its precision allows.
    DecimalPrecision(u8),
    /// A big-decimal value that is malformed or longer than [`MAX_BIG_DECIMAL_BYTES`].
    BadBigDecimal,
    /// Text read into a timestamptz column that is not an RFC 3339 instant within the years
    /// 1677 to 2262 (what nanoseconds since 1970 in 64 bits hold).
    BadZonedTimestamp,
    /// A time or timestamp that overflows when converted to the column's unit.
    TimeOverflow(i64),
    /// More array and map items in one datum than it has bytes.
    TooManyItems,
    /// Bytes left over after the datum.
    TrailingBytes(usize),
    /// One column's buffered values passed what its Arrow offsets can address.
    ColumnFull,
    /// A decoding plan that does not match its columns: a bug, reported instead of a panic.
    Internal,
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultKind::Eof => write!(f, "the datum ends inside a value"),
            FaultKind::VarintOverflow => write!(f, "a varint overflows 64 bits"),
            FaultKind::IntOutOfRange(v) => write!(f, "int value {v} does not fit 32 bits"),
            FaultKind::NegativeLength(len) => write!(f, "negative length {len}"),
            FaultKind::LengthBeyondInput { len, remaining } => write!(
                f,
                "length or count {len} exceeds the {remaining} bytes left in the datum"
            ),
            FaultKind::BadBool(b) => write!(f, "boolean byte {b} is neither 0 nor 1"),
            FaultKind::BadUtf8 => write!(f, "string is not valid UTF-8"),
            FaultKind::BadBranch { index, branches } => write!(
                f,
                "union branch {index} does not exist (the union has {branches})"
            ),
            FaultKind::BadEnum { index, symbols } => write!(
                f,
                "enum index {index} does not exist (the enum has {symbols} symbols)"
            ),
            FaultKind::BadUuid => write!(f, "uuid is neither 16 bytes nor a UUID string"),
            FaultKind::DecimalTooWide(len) => write!(
                f,
                "decimal of {len} bytes does not fit 128 bits"
            ),
            FaultKind::DecimalPrecision(p) => {
                write!(f, "decimal value has more than {p} digits")
            }
            FaultKind::BadBigDecimal => write!(
                f,
                "big-decimal is malformed or its unscaled value is longer than {MAX_BIG_DECIMAL_BYTES} bytes"
            ),
            FaultKind::BadZonedTimestamp => write!(
                f,
                "a zoned timestamp (Debezium's ZonedTimestamp) is not an RFC 3339 instant with an offset between the years 1677 and 2262"
            ),
            FaultKind::TimeOverflow(v) => write!(
                f,
                "time value {v} overflows when converted to the column's unit"
            ),
            FaultKind::TooManyItems => write!(
                f,
                "the datum declares more array and map items than it has bytes"
            ),
            FaultKind::TrailingBytes(n) => write!(f, "{n} bytes left after the datum"),
            FaultKind::ColumnFull => write!(
                f,
                "the column's buffered values exceed what Arrow offsets address (finish the batch sooner)"
            ),
            FaultKind::Internal => write!(f, "internal error: decoding plan and columns disagree"),
        }
    }
}

/// A cursor over one datum.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Array and map items the rest of the datum may still declare (see [`Reader::block_count`]).
    items_left: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            items_left: buf.len(),
        }
    }

    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// A zig-zag varint `long`.
    #[inline]
    pub(crate) fn long(&mut self) -> Result<i64, FaultKind> {
        let mut value: u64 = 0;
        let mut shift = 0u32;
        loop {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(FaultKind::Eof);
            };
            self.pos += 1;
            if shift == 63 && byte > 1 {
                return Err(FaultKind::VarintOverflow);
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
            shift += 7;
        }
    }

    /// A zig-zag varint `int`: a `long` that must fit 32 bits.
    #[inline]
    pub(crate) fn int(&mut self) -> Result<i32, FaultKind> {
        let v = self.long()?;
        i32::try_from(v).map_err(|_| FaultKind::IntOutOfRange(v))
    }

    #[inline]
    pub(crate) fn boolean(&mut self) -> Result<bool, FaultKind> {
        match self.take(1)? {
            [0] => Ok(false),
            [1] => Ok(true),
            [b, ..] => Err(FaultKind::BadBool(*b)),
            [] => Err(FaultKind::Eof),
        }
    }

    #[inline]
    pub(crate) fn float(&mut self) -> Result<f32, FaultKind> {
        let bytes = self.array::<4>()?;
        Ok(f32::from_le_bytes(bytes))
    }

    #[inline]
    pub(crate) fn double(&mut self) -> Result<f64, FaultKind> {
        let bytes = self.array::<8>()?;
        Ok(f64::from_le_bytes(bytes))
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], FaultKind> {
        let end = self.pos + N;
        let bytes = self.buf.get(self.pos..end).ok_or(FaultKind::Eof)?;
        self.pos = end;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// The next `n` bytes.
    #[inline]
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], FaultKind> {
        let end = self.pos.checked_add(n).ok_or(FaultKind::Eof)?;
        let bytes = self.buf.get(self.pos..end).ok_or(FaultKind::Eof)?;
        self.pos = end;
        Ok(bytes)
    }

    /// A length-prefixed `bytes` or `string` value, never longer than the input left.
    #[inline]
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], FaultKind> {
        let len = self.long()?;
        let n = self.length(len)?;
        self.take(n)
    }

    /// A length-prefixed string, validated as UTF-8.
    #[inline]
    pub(crate) fn string(&mut self) -> Result<&'a [u8], FaultKind> {
        let bytes = self.bytes()?;
        // The ASCII check reads a word at a time; `from_utf8` costs more per short string.
        if bytes.is_ascii() || std::str::from_utf8(bytes).is_ok() {
            Ok(bytes)
        } else {
            Err(FaultKind::BadUtf8)
        }
    }

    /// `len` as a size no larger than the input left.
    #[inline]
    fn length(&self, len: i64) -> Result<usize, FaultKind> {
        if len < 0 {
            return Err(FaultKind::NegativeLength(len));
        }
        let remaining = self.remaining();
        match usize::try_from(len) {
            Ok(n) if n <= remaining => Ok(n),
            _ => Err(FaultKind::LengthBeyondInput { len, remaining }),
        }
    }

    /// The item count of the next array or map block (0 ends the value).
    ///
    /// A block's count may not exceed the bytes left, and all the items of all the arrays and
    /// maps in one datum may not exceed the datum's length. Every item a table can hold encodes
    /// to at least one byte, and distinct items end on distinct bytes (an item that contains an
    /// array ends after that array's terminating 0), so valid data never breaks these bounds;
    /// a larger count is a lie that would otherwise cost memory or time out of proportion to
    /// the input, even with zero-size items (empty records, fixed(0), null), which are refused
    /// past the bound.
    #[inline]
    pub(crate) fn block_count(&mut self) -> Result<usize, FaultKind> {
        let count = self.long()?;
        let count = if count < 0 {
            // A negative count is followed by the block's size in bytes, which we do not need.
            let _size = self.long()?;
            count
                .checked_neg()
                .ok_or(FaultKind::NegativeLength(count))?
        } else {
            count
        };
        let n = self.length(count)?;
        self.items_left = self
            .items_left
            .checked_sub(n)
            .ok_or(FaultKind::TooManyItems)?;
        Ok(n)
    }

    /// A union branch index, checked against the union's `branches`.
    #[inline]
    pub(crate) fn branch(&mut self, branches: usize) -> Result<usize, FaultKind> {
        let index = self.long()?;
        match usize::try_from(index) {
            Ok(i) if i < branches => Ok(i),
            _ => Err(FaultKind::BadBranch { index, branches }),
        }
    }

    /// An enum symbol index, checked against the enum's `symbols`.
    #[inline]
    pub(crate) fn enum_index(&mut self, symbols: usize) -> Result<usize, FaultKind> {
        let index = self.int()?;
        match usize::try_from(index) {
            Ok(i) if i < symbols => Ok(i),
            _ => Err(FaultKind::BadEnum {
                index: i64::from(index),
                symbols,
            }),
        }
    }
}

/// Powers of ten as `u128`, for decimal precision checks: `POW10[p]` is the smallest magnitude
/// with `p + 1` digits.
const POW10: [u128; 39] = {
    let mut table = [1u128; 39];
    let mut i = 1;
    while i < 39 {
        table[i] = table[i - 1] * 10;
        i += 1;
    }
    table
};

/// A decimal's unscaled value from its big-endian two's complement bytes (empty is 0). Longer
/// than 16 bytes is accepted when the extra leading bytes only extend the sign (a wide fixed).
/// The value must have at most `precision` digits.
#[inline]
pub(crate) fn decimal(bytes: &[u8], precision: u8) -> Result<i128, FaultKind> {
    let Some(&first) = bytes.first() else {
        return Ok(0);
    };
    let negative = first & 0x80 != 0;
    let (head, tail) = bytes.split_at(bytes.len().saturating_sub(16));
    if !head.is_empty() {
        let fill = if negative { 0xff } else { 0 };
        let tail_negative = tail.first().is_some_and(|b| b & 0x80 != 0);
        if head.iter().any(|&b| b != fill) || tail_negative != negative {
            return Err(FaultKind::DecimalTooWide(bytes.len()));
        }
    }
    let mut value: i128 = if negative { -1 } else { 0 };
    for &b in tail {
        value = (value << 8) | i128::from(b);
    }
    let limit = POW10
        .get(usize::from(precision))
        .copied()
        .unwrap_or(u128::MAX);
    if value.unsigned_abs() >= limit {
        return Err(FaultKind::DecimalPrecision(precision));
    }
    Ok(value)
}

/// A UUID's 16 bytes from a `uuid` value: 16 raw bytes (as apache-avro reads them), or the
/// text in hyphenated, simple, braced or URN form.
pub(crate) fn uuid(bytes: &[u8]) -> Result<[u8; 16], FaultKind> {
    let mut out = [0u8; 16];
    if bytes.len() == 16 {
        out.copy_from_slice(bytes);
        return Ok(out);
    }
    let text = match bytes.len() {
        36 => bytes,
        32 => bytes,
        38 if bytes[0] == b'{' && bytes[37] == b'}' => &bytes[1..37],
        45 if bytes[..9].eq_ignore_ascii_case(b"urn:uuid:") => &bytes[9..],
        _ => return Err(FaultKind::BadUuid),
    };
    let hyphenated = text.len() == 36;
    if hyphenated && [8, 13, 18, 23].iter().any(|&i| text[i] != b'-') {
        return Err(FaultKind::BadUuid);
    }
    let mut digits = text
        .iter()
        .enumerate()
        .filter(|(i, _)| !(hyphenated && matches!(i, 8 | 13 | 18 | 23)))
        .map(|(_, &c)| c);
    for byte in &mut out {
        let hi = digits.next().and_then(hex).ok_or(FaultKind::BadUuid)?;
        let lo = digits.next().and_then(hex).ok_or(FaultKind::BadUuid)?;
        *byte = (hi << 4) | lo;
    }
    Ok(out)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The instant `text` names (RFC 3339: a date, `T` or a space, a time with up to nine
/// fractional digits, and `Z` or an offset; what Debezium's `ZonedTimestamp` writes), as
/// nanoseconds since 1970-01-01T00:00:00Z. A text without an offset is refused: it names no
/// instant.
pub(crate) fn zoned_timestamp(text: &[u8]) -> Result<i64, FaultKind> {
    let text = std::str::from_utf8(text).map_err(|_| FaultKind::BadUtf8)?;
    let has_offset = text.ends_with(['Z', 'z'])
        || text
            .rfind(['+', '-'])
            .is_some_and(|i| text[..i].contains(['T', 't', ' ']) && text[..i].contains(':'));
    if !has_offset {
        return Err(FaultKind::BadZonedTimestamp);
    }
    arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(text)
        .map_err(|_| FaultKind::BadZonedTimestamp)
}

/// Longest unscaled value of a big-decimal accepted, in bytes (about 2,400 digits). Converting
/// it to text is quadratic in its length, so the bound keeps hostile input cheap.
pub(crate) const MAX_BIG_DECIMAL_BYTES: usize = 1024;

/// Appends a big-decimal's text to `out`. The value (the content of the `bytes`) is the
/// unscaled value as length-prefixed big-endian two's complement bytes, then the scale as a
/// `long`. The text is Java's `BigDecimal.toString()`: plain when the scale is not negative and
/// the adjusted exponent is at least -6, scientific (`1.23E+5`) otherwise.
pub(crate) fn big_decimal(value: &[u8], out: &mut Vec<u8>) -> Result<(), FaultKind> {
    let mut r = Reader::new(value);
    let unscaled = r.bytes().map_err(|_| FaultKind::BadBigDecimal)?;
    let scale = r.long().map_err(|_| FaultKind::BadBigDecimal)?;
    if r.remaining() != 0 {
        return Err(FaultKind::BadBigDecimal);
    }
    decimal_text(unscaled, scale, out)
}

/// Appends the text of the decimal `unscaled` × 10^-`scale` to `out` (`unscaled` in
/// big-endian two's complement, at most [`MAX_BIG_DECIMAL_BYTES`]), as [`big_decimal`] does.
pub(crate) fn decimal_text(
    unscaled: &[u8],
    scale: i64,
    out: &mut Vec<u8>,
) -> Result<(), FaultKind> {
    if unscaled.len() > MAX_BIG_DECIMAL_BYTES {
        return Err(FaultKind::BadBigDecimal);
    }
    let negative = unscaled.first().is_some_and(|b| b & 0x80 != 0);
    // The magnitude as big-endian u32 limbs.
    let mut magnitude: Vec<u8> = unscaled.to_vec();
    if negative {
        // Two's complement negation: invert, then add one.
        for b in magnitude.iter_mut() {
            *b = !*b;
        }
        for b in magnitude.iter_mut().rev() {
            let (sum, carry) = b.overflowing_add(1);
            *b = sum;
            if !carry {
                break;
            }
        }
    }
    let mut limbs: Vec<u32> = Vec::with_capacity(magnitude.len() / 4 + 1);
    let pad = (4 - magnitude.len() % 4) % 4;
    let mut padded = vec![0u8; pad];
    padded.extend_from_slice(&magnitude);
    for chunk in padded.chunks_exact(4) {
        limbs.push(u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]));
    }
    // Decimal digits by repeated division by 10^9, least significant group first.
    let mut groups: Vec<u32> = Vec::new();
    loop {
        while limbs.first() == Some(&0) {
            limbs.remove(0);
        }
        if limbs.is_empty() {
            break;
        }
        let mut rem: u64 = 0;
        for limb in limbs.iter_mut() {
            let cur = (rem << 32) | u64::from(*limb);
            *limb = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        groups.push(rem as u32);
    }
    let mut digits = String::new();
    match groups.split_last() {
        None => digits.push('0'),
        Some((most, rest)) => {
            digits.push_str(&most.to_string());
            for g in rest.iter().rev() {
                digits.push_str(&format!("{g:09}"));
            }
        }
    }
    let digits = digits.as_bytes();
    if negative {
        out.push(b'-');
    }
    let len = digits.len() as i128;
    let adjusted = len - 1 - i128::from(scale);
    if scale >= 0 && adjusted >= -6 {
        let scale = scale as usize; // bounded: scale <= len + 5 here
        if scale == 0 {
            out.extend_from_slice(digits);
        } else if digits.len() > scale {
            let (int, frac) = digits.split_at(digits.len() - scale);
            out.extend_from_slice(int);
            out.push(b'.');
            out.extend_from_slice(frac);
        } else {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', scale - digits.len()));
            out.extend_from_slice(digits);
        }
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'E');
        if adjusted >= 0 {
            out.push(b'+');
        }
        out.extend_from_slice(adjusted.to_string().as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zigzag(v: i64) -> Vec<u8> {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        loop {
            if n < 0x80 {
                out.push(n as u8);
                return out;
            }
            out.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
    }

    #[test]
    fn varints_round_trip_at_the_edges() {
        for v in [
            0,
            -1,
            1,
            63,
            -64,
            64,
            i32::MAX as i64,
            i32::MIN as i64,
            i64::MAX,
            i64::MIN,
        ] {
            let bytes = zigzag(v);
            let mut r = Reader::new(&bytes);
            assert_eq!(r.long(), Ok(v));
            assert_eq!(r.remaining(), 0);
        }
        let mut r = Reader::new(&[0xff; 11]);
        assert_eq!(r.long(), Err(FaultKind::VarintOverflow));
        let mut r = Reader::new(&[0x80]);
        assert_eq!(r.long(), Err(FaultKind::Eof));
        let too_big = zigzag(i64::from(i32::MAX) + 1);
        assert!(matches!(
            Reader::new(&too_big).int(),
            Err(FaultKind::IntOutOfRange(_))
        ));
    }

    #[test]
    fn lengths_are_bounded_by_the_input() {
        let mut bytes = zigzag(5);
        bytes.extend_from_slice(b"abc");
        assert!(matches!(
            Reader::new(&bytes).bytes(),
            Err(FaultKind::LengthBeyondInput {
                len: 5,
                remaining: 3
            })
        ));
        assert!(matches!(
            Reader::new(&zigzag(-2)).bytes(),
            Err(FaultKind::NegativeLength(-2))
        ));
        let mut huge = zigzag(i64::MIN);
        huge.extend(zigzag(0));
        assert!(Reader::new(&huge).block_count().is_err());
    }

    #[test]
    fn decimals_sign_extend_and_check_precision() {
        assert_eq!(decimal(&[], 5), Ok(0));
        assert_eq!(decimal(&[0xff], 5), Ok(-1));
        assert_eq!(decimal(&[0x30, 0x39], 5), Ok(12345));
        assert_eq!(decimal(&[0xcf, 0xc7], 5), Ok(-12345));
        assert_eq!(
            decimal(&[0x30, 0x39], 4),
            Err(FaultKind::DecimalPrecision(4))
        );
        let mut wide = vec![0xff; 4];
        wide.extend_from_slice(&[0xff; 15]);
        wide.push(0xfe);
        assert_eq!(decimal(&wide, 38), Ok(-2));
        let mut bad = vec![0x01; 4];
        bad.extend_from_slice(&[0; 16]);
        assert_eq!(decimal(&bad, 38), Err(FaultKind::DecimalTooWide(20)));
    }

    #[test]
    fn uuids_parse_in_every_text_form() {
        let want = [
            0x55, 0x0e, 0x84, 0x00, 0xe2, 0x9b, 0x41, 0xd4, 0xa7, 0x16, 0x44, 0x66, 0x55, 0x44,
            0x00, 0x00,
        ];
        for text in [
            "550e8400-e29b-41d4-a716-446655440000",
            "550E8400E29B41D4A716446655440000",
            "{550e8400-e29b-41d4-a716-446655440000}",
            "urn:uuid:550e8400-e29b-41d4-a716-446655440000",
        ] {
            assert_eq!(uuid(text.as_bytes()), Ok(want), "{text}");
        }
        assert_eq!(uuid(&want), Ok(want));
        for bad in [
            "550e8400-e29b-41d4-a716-44665544000g",
            "550e8400e-29b-41d4-a716-446655440000",
            "550e8400",
        ] {
            assert_eq!(uuid(bad.as_bytes()), Err(FaultKind::BadUuid), "{bad}");
        }
    }

    fn big(unscaled: &[u8], scale: i64) -> String {
        let mut value = zigzag(unscaled.len() as i64);
        value.extend_from_slice(unscaled);
        value.extend(zigzag(scale));
        let mut out = Vec::new();
        big_decimal(&value, &mut out).expect("valid big-decimal");
        String::from_utf8(out).expect("ascii")
    }

    #[test]
    fn big_decimals_format_like_java() {
        assert_eq!(big(&[0x30, 0x39], 2), "123.45");
        assert_eq!(big(&[0xcf, 0xc7], 2), "-123.45");
        assert_eq!(big(&[0x01], 3), "0.001");
        assert_eq!(big(&[0x7b], 0), "123");
        assert_eq!(big(&[0x7b], -2), "1.23E+4");
        assert_eq!(big(&[0x7b], 10), "1.23E-8");
        assert_eq!(big(&[], 2), "0.00");
        assert_eq!(big(&[0x00], -2), "0E+2");
        // 2^64 = 18446744073709551616, a multi-limb value.
        assert_eq!(
            big(&[0x01, 0, 0, 0, 0, 0, 0, 0, 0], 4),
            "1844674407370955.1616"
        );
        assert_eq!(
            big(&[0xff, 0, 0, 0, 0, 0, 0, 0, 0], 0),
            "-18446744073709551616"
        );
        let mut out = Vec::new();
        assert_eq!(
            big_decimal(&[0x04, 0x01], &mut out),
            Err(FaultKind::BadBigDecimal)
        );
    }
}
