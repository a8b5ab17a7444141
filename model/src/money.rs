//! Fixed-point money: [`Money`] (an amount) and [`Price`] (an hourly rate).
//!
//! Both count micro-dollars (10⁻⁶ USD) in an `i64`, enough for ±9.2 trillion
//! dollars, so cents are never lost and the arithmetic is exact. Prices are parsed
//! from and printed as decimal strings; `f64` appears only at the edges where a
//! statistic (an expected value) is turned into money, and there it is rounded once.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const MICROS_PER_USD: i64 = 1_000_000;

/// An error parsing a decimal dollar amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid dollar amount '{input}': {reason}")]
pub struct ParseMoneyError {
    input: String,
    reason: &'static str,
}

fn parse_micros(input: &str) -> Result<i64, ParseMoneyError> {
    let err = |reason| ParseMoneyError {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    let s = s.strip_prefix('$').unwrap_or(s);
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if s.is_empty() {
        return Err(err("expected a decimal number such as 2.5 or 0.0035"));
    }
    let (whole, frac) = match s.split_once('.') {
        Some((w, f)) => (w, f),
        None => (s, ""),
    };
    if whole.is_empty() && frac.is_empty() {
        return Err(err("expected a decimal number such as 2.5 or 0.0035"));
    }
    if !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err("expected a decimal number such as 2.5 or 0.0035"));
    }
    if frac.len() > 6 && frac[6..].bytes().any(|b| b != b'0') {
        return Err(err("more precision than a micro-dollar (6 decimal places)"));
    }
    let whole_v: i64 = if whole.is_empty() {
        0
    } else {
        whole
            .parse::<i64>()
            .map_err(|_| err("amount is too large"))?
    };
    let mut frac_v: i64 = 0;
    for (i, b) in frac.bytes().take(6).enumerate() {
        frac_v += i64::from(b - b'0') * 10_i64.pow(5 - i as u32);
    }
    let micros = whole_v
        .checked_mul(MICROS_PER_USD)
        .and_then(|w| w.checked_add(frac_v))
        .ok_or_else(|| err("amount is too large"))?;
    Ok(if negative { -micros } else { micros })
}

fn fmt_micros(micros: i64, decimals: usize, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let decimals = decimals.min(6);
    let scale = 10_i64.pow(6 - decimals as u32);
    // Round half away from zero to the requested number of decimals.
    let abs = micros.unsigned_abs() as i128;
    let rounded = (abs + (scale as i128) / 2) / scale as i128;
    let unit = 10_i128.pow(decimals as u32);
    let sign = if micros < 0 && rounded != 0 { "-" } else { "" };
    if decimals == 0 {
        write!(f, "{sign}{rounded}")
    } else {
        write!(
            f,
            "{sign}{}.{:0width$}",
            rounded / unit,
            rounded % unit,
            width = decimals
        )
    }
}

/// An amount of money in US dollars, held as whole micro-dollars. It
/// displays in cents (`12.35`) and serializes with all six decimals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(i64);

impl Money {
    /// Zero dollars.
    pub const ZERO: Money = Money(0);

    /// An amount from micro-dollars.
    pub const fn from_micros(micros: i64) -> Self {
        Money(micros)
    }

    /// An amount from whole cents.
    pub const fn from_cents(cents: i64) -> Self {
        Money(cents * 10_000)
    }

    /// The amount in micro-dollars.
    pub const fn micros(self) -> i64 {
        self.0
    }

    /// Rounds an expected value in dollars to the nearest micro-dollar; an
    /// amount beyond ±$9.2 trillion (or not a number) is an error, never a
    /// silently clamped figure.
    pub fn from_usd_f64(usd: f64) -> crate::Result<Self> {
        let micros = (usd * MICROS_PER_USD as f64).round();
        // i64::MAX as f64 rounds up to 2^63, itself out of range.
        if !micros.is_finite() || micros >= i64::MAX as f64 || micros < i64::MIN as f64 {
            return Err(overflow(format!("${usd}")));
        }
        Ok(Money(micros as i64))
    }

    /// The amount in dollars as a float, for statistics and presentation only.
    pub fn as_usd_f64(self) -> f64 {
        self.0 as f64 / MICROS_PER_USD as f64
    }

    /// Adds, or `None` on overflow.
    pub fn checked_add(self, other: Money) -> Option<Money> {
        self.0.checked_add(other.0).map(Money)
    }

    /// Subtracts, or `None` on overflow.
    pub fn checked_sub(self, other: Money) -> Option<Money> {
        self.0.checked_sub(other.0).map(Money)
    }

    /// Adds, saturating at the representable range.
    pub fn saturating_add(self, other: Money) -> Money {
        Money(self.0.saturating_add(other.0))
    }

    /// A display adapter with a fixed number of decimals (0 to 6).
    pub fn display(self, decimals: usize) -> impl fmt::Display {
        Fixed(self.0, decimals)
    }
}

struct Fixed(i64, usize);

impl fmt::Display for Fixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_micros(self.0, self.1, f)
    }
}

impl FromStr for Money {
    type Err = ParseMoneyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_micros(s).map(Money)
    }
}

impl std::ops::Add for Money {
    type Output = Money;
    /// Panics on overflow in debug builds like any integer; use
    /// [`Money::checked_add`] for untrusted sums.
    fn add(self, rhs: Money) -> Money {
        Money(self.0 + rhs.0)
    }
}

impl Money {
    /// The sum of `amounts`, or an error when it passes ±$9.2 trillion.
    pub fn try_sum<I: IntoIterator<Item = Money>>(amounts: I) -> crate::Result<Money> {
        amounts.into_iter().try_fold(Money::ZERO, |acc, m| {
            acc.checked_add(m)
                .ok_or_else(|| overflow(format!("a sum past ${}", acc.display(2))))
        })
    }
}

/// The error for an amount money cannot hold.
fn overflow(what: String) -> crate::Error {
    crate::Error::invalid_input(format!(
        "{what} is beyond the ±$9,223,372,036,854 an amount can hold (micro-dollars in 64 bits)"
    ))
}

/// An hourly rate in US dollars per hour, held as whole micro-dollars per hour.
///
/// Prices are never negative: parsing a negative amount fails. A price
/// displays with four decimals (`9.8300`) and serializes with all six.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Price(i64);

impl Price {
    /// Free.
    pub const ZERO: Price = Price(0);

    /// A rate from micro-dollars per hour; negative values are clamped to zero.
    pub const fn from_micros_per_hour(micros: i64) -> Self {
        Price(if micros < 0 { 0 } else { micros })
    }

    /// The rate in micro-dollars per hour.
    pub const fn micros_per_hour(self) -> i64 {
        self.0
    }

    /// The rate in dollars per hour as a float, for statistics and presentation only.
    pub fn usd_per_hour_f64(self) -> f64 {
        self.0 as f64 / MICROS_PER_USD as f64
    }

    /// Rounds a dollars-per-hour float to the nearest micro-dollar (negative and
    /// `NaN` become zero).
    pub fn from_usd_per_hour_f64(usd: f64) -> Self {
        if usd.is_nan() || usd <= 0.0 {
            return Price::ZERO;
        }
        Price((usd * MICROS_PER_USD as f64).round() as i64)
    }

    /// The cost of running for `hours` (a statistic such as expected hours),
    /// rounded to the nearest micro-dollar.
    /// An error when the cost passes what money can hold.
    pub fn cost_for_hours(self, hours: f64) -> crate::Result<Money> {
        Money::from_usd_f64(self.usd_per_hour_f64() * hours).map_err(|_| {
            overflow(format!(
                "the cost of {hours} h at ${}/h",
                Money::from_micros(self.0).display(4)
            ))
        })
    }

    /// The exact cost of running for a whole number of seconds; an error when
    /// it passes what money can hold.
    pub fn cost_for_seconds(self, seconds: u64) -> crate::Result<Money> {
        let micros = (self.0 as i128 * seconds as i128 + 1_800) / 3_600;
        i64::try_from(micros).map(Money).map_err(|_| {
            overflow(format!(
                "the cost of {seconds} s at ${}/h",
                Money::from_micros(self.0).display(4)
            ))
        })
    }

    /// This rate times `n` (for example a per-GPU price times the GPU count), or
    /// `None` on overflow.
    pub fn checked_mul(self, n: u32) -> Option<Price> {
        self.0.checked_mul(i64::from(n)).map(Price)
    }

    /// The sum of two rates, or `None` on overflow.
    pub fn checked_add(self, other: Price) -> Option<Price> {
        self.0.checked_add(other.0).map(Price)
    }

    /// This rate divided by `n`, rounded to the nearest micro-dollar (`n` of zero
    /// gives the rate unchanged).
    pub fn per(self, n: u32) -> Price {
        if n == 0 {
            return self;
        }
        let n = i64::from(n);
        Price((self.0 + n / 2) / n)
    }

    /// The fraction this rate saves against `other` (0.41 = 41 % cheaper); `None`
    /// when `other` is free.
    pub fn saving_against(self, other: Price) -> Option<f64> {
        (other.0 > 0).then(|| 1.0 - self.0 as f64 / other.0 as f64)
    }

    /// A display adapter with a fixed number of decimals (0 to 6).
    pub fn display(self, decimals: usize) -> impl fmt::Display {
        Fixed(self.0, decimals)
    }
}

impl FromStr for Price {
    type Err = ParseMoneyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let micros = parse_micros(s)?;
        if micros < 0 {
            return Err(ParseMoneyError {
                input: s.to_string(),
                reason: "a price cannot be negative",
            });
        }
        Ok(Price(micros))
    }
}

/// Text for a micro-dollar type: `Display` with `$shown` decimals, and serde
/// as a decimal string with all six (so JSON round-trips exactly).
macro_rules! decimal_text {
    ($ty:ident, $shown:expr) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt_micros(self.0, $shown, f)
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(&Fixed(self.0, 6))
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

// Money shows cents (`12.35`); a price shows four decimals (`9.8300` an hour).
decimal_text!(Money, 2);
decimal_text!(Price, 4);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimal_prices_exactly() {
        assert_eq!(
            "0.2324".parse::<Price>().unwrap().micros_per_hour(),
            232_400
        );
        assert_eq!(
            "32.7726".parse::<Price>().unwrap().micros_per_hour(),
            32_772_600
        );
        assert_eq!("$3".parse::<Price>().unwrap().micros_per_hour(), 3_000_000);
        assert_eq!(".5".parse::<Price>().unwrap().micros_per_hour(), 500_000);
        assert_eq!(
            "115.542415126575".parse::<Price>().unwrap_err().to_string(),
            "invalid dollar amount '115.542415126575': more precision than a micro-dollar (6 decimal places)"
        );
        assert_eq!(
            "1.2500000".parse::<Price>().unwrap().micros_per_hour(),
            1_250_000
        );
    }

    #[test]
    fn rejects_bad_prices() {
        for bad in ["", "-1", "abc", "1.2.3", "1e5", ".", "99999999999999999"] {
            assert!(bad.parse::<Price>().is_err(), "{bad}");
        }
        assert_eq!("-1.5".parse::<Money>().unwrap().micros(), -1_500_000);
    }

    #[test]
    fn formats_with_rounding() {
        let p = Price::from_micros_per_hour(9_834_950);
        assert_eq!(p.to_string(), "9.8350");
        assert_eq!(p.display(2).to_string(), "9.83");
        assert_eq!(Money::from_micros(-5_000).to_string(), "-0.01");
        assert_eq!(Money::from_micros(-4_000).to_string(), "0.00");
        assert_eq!(Money::from_cents(1234).to_string(), "12.34");
    }

    #[test]
    fn costs_are_exact_for_whole_seconds() {
        let p: Price = "3.60".parse().unwrap();
        assert_eq!(p.cost_for_seconds(3_600).unwrap(), Money::from_cents(360));
        assert_eq!(p.cost_for_seconds(1).unwrap(), Money::from_micros(1_000));
        assert_eq!(p.cost_for_hours(0.5).unwrap(), Money::from_cents(180));
        assert_eq!(p.per(8).micros_per_hour(), 450_000);
    }

    /// Past ±$9.2 trillion an amount is an error naming the figure, never a
    /// clamped $9,223,372,036,854.78 (two different pools used to print
    /// exactly that).
    #[test]
    fn money_that_cannot_be_held_is_an_error_not_a_clamp() {
        let p: Price = "1000000".parse().unwrap();
        let e = p.cost_for_hours(1e10).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
        assert!(
            e.to_string().contains("10000000000 h at $1000000.0000/h"),
            "{e}"
        );
        assert!(e.to_string().contains("beyond"), "{e}");
        assert!(p.cost_for_hours(f64::INFINITY).is_err());
        assert!(p.cost_for_hours(f64::NAN).is_err());
        assert!(p.cost_for_seconds(u64::MAX).is_err());
        assert!(Money::from_usd_f64(9.3e12).is_err());
        assert_eq!(
            Money::from_usd_f64(-1.5).unwrap(),
            Money::from_micros(-1_500_000)
        );
        let big = Money::from_micros(i64::MAX - 1);
        assert!(Money::try_sum([big, Money::from_micros(2)]).is_err());
        assert_eq!(
            Money::try_sum([Money::from_cents(1), Money::from_cents(2)]).unwrap(),
            Money::from_cents(3)
        );
    }

    #[test]
    fn serde_round_trips_as_decimal_strings() {
        let p: Price = "0.0035".parse().unwrap();
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, "\"0.003500\"");
        assert_eq!(serde_json::from_str::<Price>(&json).unwrap(), p);
    }
}
