package io.kafkaaudit.interceptor;

import java.math.BigInteger;

/**
 * Durations as audit-lib's configuration reads them (humantime's {@code
 * parse_duration}): spans of a number and a unit, {@code "10m"}, {@code "1h 30m"},
 * {@code "1.5h"}, {@code "2days"}; u64 arithmetic whose overflow is an error.
 */
final class Durations {
  private Durations() {}

  private static final BigInteger U64_MAX = new BigInteger("18446744073709551615");
  private static final BigInteger BILLION = BigInteger.valueOf(1_000_000_000L);

  /** A parsed duration: seconds (u64) and nanoseconds below one second. */
  static final class Duration {
    final BigInteger secs;
    final long nanos;

    Duration(BigInteger secs, long nanos) {
      this.secs = secs;
      this.nanos = nanos;
    }

    /** Whole milliseconds, or -1 when they do not fit in an i64. */
    long millisOrMinusOne() {
      BigInteger ms = secs.multiply(BigInteger.valueOf(1000)).add(BigInteger.valueOf(nanos / 1_000_000));
      return ms.bitLength() < 64 ? ms.longValue() : -1;
    }
  }

  /** Why a duration does not parse. */
  static final class Invalid extends Exception {
    private static final long serialVersionUID = 1L;

    Invalid(String why) {
      super(why);
    }
  }

  private static BigInteger check(BigInteger v) throws Invalid {
    if (v.compareTo(U64_MAX) > 0) {
      throw new Invalid("number is too large");
    }
    return v;
  }

  private static boolean isUnitChar(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == 'µ';
  }

  static Duration parse(String s) throws Invalid {
    if (s.equals("0")) {
      return new Duration(BigInteger.ZERO, 0);
    }
    int[] cps = s.codePoints().toArray();
    int[] pos = {0};
    BigInteger n = firstDigit(cps, pos);
    if (n == null) {
      throw new Invalid("value was empty");
    }
    BigInteger[] out = {BigInteger.ZERO, BigInteger.ZERO}; // secs, nanos
    outer:
    while (true) {
      BigInteger[] frac = null; // numerator, denominator
      int off = pos[0];
      while (pos[0] < cps.length) {
        int c = cps[pos[0]++];
        if (c >= '0' && c <= '9') {
          n = check(n.multiply(BigInteger.TEN).add(BigInteger.valueOf(c - '0')));
        } else if (RustStr.isWhitespace(c)) {
          // spaces between the number and its unit
        } else if (isUnitChar(c)) {
          break; // the unit starts at off (this character is consumed, as in humantime)
        } else if (c == '.') {
          frac = fraction(cps, pos);
          off = pos[0]; // where the unit starts (or the end)
          if (pos[0] < cps.length) {
            pos[0]++;
          }
          break;
        } else {
          throw new Invalid("invalid character");
        }
        off = pos[0];
      }
      int start = off;
      int end = pos[0];
      while (pos[0] < cps.length) {
        int c = cps[pos[0]++];
        if (c >= '0' && c <= '9') {
          addUnit(cps, n, frac, start, end, out);
          n = BigInteger.valueOf(c - '0');
          continue outer;
        } else if (RustStr.isWhitespace(c)) {
          break;
        } else if (isUnitChar(c)) {
          // part of the unit
        } else {
          throw new Invalid("invalid character");
        }
        end = pos[0];
      }
      addUnit(cps, n, frac, start, end, out);
      n = firstDigit(cps, pos);
      if (n == null) {
        return new Duration(out[0], out[1].longValueExact());
      }
    }
  }

  /** The first digit after spaces, null at the end; anything else is an error. */
  private static BigInteger firstDigit(int[] cps, int[] pos) throws Invalid {
    while (pos[0] < cps.length) {
      int c = cps[pos[0]++];
      if (c >= '0' && c <= '9') {
        return BigInteger.valueOf(c - '0');
      }
      if (!RustStr.isWhitespace(c)) {
        throw new Invalid("expected a number");
      }
    }
    return null;
  }

  private static BigInteger[] fraction(int[] cps, int[] pos) throws Invalid {
    BigInteger numerator = BigInteger.ZERO;
    BigInteger denominator = BigInteger.ONE;
    boolean zeros = true;
    while (pos[0] < cps.length) {
      int c = cps[pos[0]++];
      if (c == '0') {
        denominator = check(denominator.multiply(BigInteger.TEN));
        if (!zeros) {
          numerator = check(numerator.multiply(BigInteger.TEN));
        }
      } else if (c >= '1' && c <= '9') {
        zeros = false;
        denominator = check(denominator.multiply(BigInteger.TEN));
        numerator = check(numerator.multiply(BigInteger.TEN).add(BigInteger.valueOf(c - '0')));
      } else if (RustStr.isWhitespace(c)) {
        // ignored inside the fraction, as humantime does
      } else if (isUnitChar(c)) {
        pos[0]--; // left for the caller: the unit starts here
        break;
      } else {
        throw new Invalid("invalid character");
      }
    }
    if (denominator.equals(BigInteger.ONE)) {
      throw new Invalid("no digits after the decimal point");
    }
    return new BigInteger[] {numerator, denominator};
  }

  private static BigInteger div(BigInteger a, BigInteger d) throws Invalid {
    BigInteger[] qr = a.divideAndRemainder(d);
    if (qr[1].signum() != 0) {
      throw new Invalid("fraction is too precise");
    }
    return qr[0];
  }

  private static void addUnit(int[] cps, BigInteger n, BigInteger[] frac, int start, int end, BigInteger[] out)
      throws Invalid {
    String unit = new String(cps, start, end - start);
    long secsPer;
    long nanosPer;
    switch (unit) {
      case "nanos":
      case "nsec":
      case "ns":
        secsPer = 0;
        nanosPer = 1;
        break;
      case "usec":
      case "us":
      case "µs":
        secsPer = 0;
        nanosPer = 1000;
        break;
      case "millis":
      case "msec":
      case "ms":
        secsPer = 0;
        nanosPer = 1_000_000;
        break;
      case "seconds":
      case "second":
      case "secs":
      case "sec":
      case "s":
        secsPer = 1;
        nanosPer = 0;
        break;
      case "minutes":
      case "minute":
      case "min":
      case "mins":
      case "m":
        secsPer = 60;
        nanosPer = 0;
        break;
      case "hours":
      case "hour":
      case "hr":
      case "hrs":
      case "h":
        secsPer = 3600;
        nanosPer = 0;
        break;
      case "days":
      case "day":
      case "d":
        secsPer = 86_400;
        nanosPer = 0;
        break;
      case "weeks":
      case "week":
      case "wk":
      case "wks":
      case "w":
        secsPer = 86_400 * 7;
        nanosPer = 0;
        break;
      case "months":
      case "month":
      case "M":
        secsPer = 2_630_016;
        nanosPer = 0;
        break;
      case "years":
      case "year":
      case "yr":
      case "yrs":
      case "y":
        secsPer = 31_557_600;
        nanosPer = 0;
        break;
      default:
        throw new Invalid("unknown time unit \"" + unit + "\"");
    }
    BigInteger sec = check(n.multiply(BigInteger.valueOf(secsPer)));
    BigInteger nsec = check(n.multiply(BigInteger.valueOf(nanosPer)));
    add(sec, nsec, out);
    if (frac != null) {
      BigInteger num = frac[0];
      BigInteger den = frac[1];
      BigInteger fs = BigInteger.ZERO;
      BigInteger fn = BigInteger.ZERO;
      if (secsPer == 0 && nanosPer == 1) {
        throw new Invalid("fraction of nanoseconds");
      } else if (secsPer == 0) {
        fn = div(check(num.multiply(BigInteger.valueOf(nanosPer))), den);
      } else if (secsPer == 1) {
        fn = div(check(num.multiply(BILLION)), den);
      } else if (secsPer == 60) {
        fn = div(check(num.multiply(BigInteger.valueOf(60_000_000_000L))), den);
      } else {
        fs = div(check(num.multiply(BigInteger.valueOf(secsPer))), den);
      }
      add(fs, fn, out);
    }
  }

  private static void add(BigInteger sec, BigInteger nsec, BigInteger[] out) throws Invalid {
    BigInteger ns = check(out[1].add(nsec));
    if (ns.compareTo(BILLION) > 0) {
      sec = check(sec.add(ns.divide(BILLION)));
      ns = ns.mod(BILLION);
    }
    sec = check(out[0].add(sec));
    // Duration::new carries a whole second of nanoseconds into the seconds.
    if (ns.compareTo(BILLION) >= 0) {
      sec = check(sec.add(ns.divide(BILLION)));
      ns = ns.mod(BILLION);
    }
    out[0] = sec;
    out[1] = ns;
  }
}
