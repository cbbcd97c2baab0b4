//! RFC 3339 dates and times as Iceberg's date (days since 1970-01-01), time (microseconds
//! since midnight) and timestamptz (microseconds since the epoch, UTC).
//!
//! Hand-written because the crate has no date library, and RFC 3339 is small. Lenient where
//! producers commonly are: a space may separate date and time, `t`/`z` may be lowercase, and a
//! date-time or time without an offset is taken as UTC. Fractions beyond microseconds are
//! truncated; a leap second (`:60`) becomes the last microsecond of its minute.

use inlet_common::civil::days_from_civil;

use crate::error::{Error, Result};

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// Days since 1970-01-01 of a full-date, e.g. "2024-02-29".
pub(super) fn parse_date(text: &str) -> Result<i32> {
    let mut cursor = Cursor::new(text);
    let days = cursor.date();
    match days {
        Some(days) if cursor.at_end() => i32::try_from(days).map_err(|_| invalid(text, "date")),
        _ => Err(invalid(text, "date")),
    }
}

/// Microseconds since the epoch of a date-time, e.g. "2024-02-29T12:30:00.5+02:00".
pub(super) fn parse_date_time(text: &str) -> Result<i64> {
    let mut cursor = Cursor::new(text);
    let micros = (|| {
        let days = cursor.date()?;
        if !matches!(cursor.next()?, b'T' | b't' | b' ') {
            return None;
        }
        let time = cursor.time()?;
        let offset = cursor.offset()?;
        if !cursor.at_end() {
            return None;
        }
        days.checked_mul(MICROS_PER_DAY)?
            .checked_add(time)?
            .checked_sub(offset)
    })();
    micros.ok_or_else(|| invalid(text, "date-time"))
}

/// Microseconds since midnight of a time, e.g. "12:30:00" or "12:30:00.5+02:00". An offset
/// converts the time to UTC, wrapping around midnight.
pub(super) fn parse_time(text: &str) -> Result<i64> {
    let mut cursor = Cursor::new(text);
    let micros = (|| {
        let time = cursor.time()?;
        let offset = cursor.offset()?;
        cursor
            .at_end()
            .then(|| (time - offset).rem_euclid(MICROS_PER_DAY))
    })();
    micros.ok_or_else(|| invalid(text, "time"))
}

fn invalid(text: &str, what: &str) -> Error {
    let shown: String = text.chars().take(64).collect();
    Error::Decode(format!("\"{shown}\" is not an RFC 3339 {what}"))
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str) -> Self {
        Cursor {
            bytes: text.as_bytes(),
            pos: 0,
        }
    }

    fn at_end(&self) -> bool {
        self.pos == self.bytes.len()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    /// Exactly `count` decimal digits.
    fn digits(&mut self, count: usize) -> Option<i64> {
        let mut value = 0i64;
        for _ in 0..count {
            let byte = self.next()?;
            if !byte.is_ascii_digit() {
                return None;
            }
            value = value * 10 + i64::from(byte - b'0');
        }
        Some(value)
    }

    /// YYYY-MM-DD as days since 1970-01-01.
    fn date(&mut self) -> Option<i64> {
        let year = self.digits(4)?;
        self.expect(b'-')?;
        let month = self.digits(2)?;
        self.expect(b'-')?;
        let day = self.digits(2)?;
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return None;
        }
        Some(days_from_civil(year, month, day))
    }

    /// HH:MM:SS[.fraction] as microseconds since midnight.
    fn time(&mut self) -> Option<i64> {
        let hour = self.digits(2)?;
        self.expect(b':')?;
        let minute = self.digits(2)?;
        self.expect(b':')?;
        let second = self.digits(2)?;
        if hour > 23 || minute > 59 || second > 60 {
            return None;
        }
        let mut micros = 0;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            let mut scale = 100_000;
            let mut count = 0;
            while let Some(byte) = self.peek().filter(u8::is_ascii_digit) {
                self.pos += 1;
                micros += i64::from(byte - b'0') * scale;
                scale /= 10;
                count += 1;
            }
            if count == 0 {
                return None;
            }
        }
        if second == 60 {
            return Some((hour * 3600 + minute * 60 + 60) * MICROS_PER_SECOND - 1);
        }
        Some((hour * 3600 + minute * 60 + second) * MICROS_PER_SECOND + micros)
    }

    /// Z, ±HH:MM, or nothing (UTC), as microseconds to subtract to get UTC.
    fn offset(&mut self) -> Option<i64> {
        let sign = match self.peek() {
            None => return Some(0),
            Some(b'Z' | b'z') => {
                self.pos += 1;
                return Some(0);
            }
            Some(b'+') => 1,
            Some(b'-') => -1,
            Some(_) => return None,
        };
        self.pos += 1;
        let hours = self.digits(2)?;
        self.expect(b':')?;
        let minutes = self.digits(2)?;
        if hours > 23 || minutes > 59 {
            return None;
        }
        Some(sign * (hours * 3600 + minutes * 60) * MICROS_PER_SECOND)
    }
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(parse_date("1970-01-01").expect("date"), 0);
        assert_eq!(parse_date("1969-12-31").expect("date"), -1);
        assert_eq!(parse_date("2000-03-01").expect("date"), 11_017);
        assert_eq!(parse_date("2024-02-29").expect("date"), 19_782);
        assert_eq!(parse_date("0001-01-01").expect("date"), -719_162);
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-00-10",
            "2024-1-01",
            "2024-01-01x",
            "",
        ] {
            assert!(parse_date(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn date_times() {
        let base = 1_700_000_000 * MICROS_PER_SECOND; // 2023-11-14T22:13:20Z
        assert_eq!(parse_date_time("2023-11-14T22:13:20Z").expect("dt"), base);
        assert_eq!(parse_date_time("2023-11-14t22:13:20z").expect("dt"), base);
        assert_eq!(parse_date_time("2023-11-14 22:13:20").expect("dt"), base);
        assert_eq!(
            parse_date_time("2023-11-15T00:13:20.1234567+02:00").expect("dt"),
            base + 123_456
        );
        assert_eq!(
            parse_date_time("2023-11-14T21:13:20.5-01:00").expect("dt"),
            base + 500_000
        );
        assert_eq!(
            parse_date_time("1969-12-31T23:59:59.999999Z").expect("dt"),
            -1
        );
        assert_eq!(
            parse_date_time("2016-12-31T23:59:60Z").expect("dt"),
            parse_date_time("2017-01-01T00:00:00Z").expect("dt") - 1
        );
        for bad in [
            "2023-11-14",
            "2023-11-14T22:13",
            "2023-11-14T24:00:00Z",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20+0200",
            "2023-11-14T22:13:20Zjunk",
        ] {
            assert!(parse_date_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("00:00:00").expect("time"), 0);
        assert_eq!(
            parse_time("12:30:01.25").expect("time"),
            (12 * 3600 + 30 * 60 + 1) * MICROS_PER_SECOND + 250_000
        );
        assert_eq!(
            parse_time("01:00:00+02:00").expect("time"),
            23 * 3600 * MICROS_PER_SECOND
        );
        assert!(parse_time("25:00:00").is_err());
        assert!(parse_time("12:00").is_err());
    }
}
