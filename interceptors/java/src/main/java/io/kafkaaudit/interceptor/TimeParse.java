package io.kafkaaudit.interceptor;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;

/**
 * A found value as epoch milliseconds, exactly as audit-lib converts it
 * ({@code audit-lib/src/timeparse.rs}): decimal integer arithmetic, sub-millisecond parts
 * floored toward −∞, the unit explicit or by magnitude, RFC 3339 as chrono parses it.
 */
final class TimeParse {
  private TimeParse() {}

  /** The unit or format an event time was read in; {@code name} as in reports. */
  enum TimeUnit {
    SECONDS("s", 3),
    MILLIS("ms", 0),
    MICROS("us", -3),
    NANOS("ns", -6),
    RFC3339("rfc3339", 0);

    final String label;
    final int msShift;

    TimeUnit(String label, int msShift) {
      this.label = label;
      this.msShift = msShift;
    }
  }

  /** The configured unit of numbers: {@code null} is auto (by magnitude). */
  enum Unit {
    AUTO,
    SECONDS,
    MILLIS,
    MICROS,
    NANOS;

    static Unit parse(String s) {
      switch (s) {
        case "auto":
          return AUTO;
        case "s":
          return SECONDS;
        case "ms":
          return MILLIS;
        case "us":
        case "µs":
          return MICROS;
        case "ns":
          return NANOS;
        default:
          return null;
      }
    }

    String label() {
      switch (this) {
        case AUTO:
          return "auto";
        case SECONDS:
          return "s";
        case MILLIS:
          return "ms";
        case MICROS:
          return "us";
        default:
          return "ns";
      }
    }
  }

  enum Outcome {
    TIME,
    OUT_OF_RANGE,
    NOT_A_TIME
  }

  /** A conversion's result: a time, a time outside i64 ms (saturated), or no time. */
  static final class Result {
    final Outcome outcome;
    final long ms;
    final TimeUnit unit;
    final boolean negative;

    private Result(Outcome outcome, long ms, TimeUnit unit, boolean negative) {
      this.outcome = outcome;
      this.ms = ms;
      this.unit = unit;
      this.negative = negative;
    }

    static Result time(long ms, TimeUnit unit) {
      return new Result(Outcome.TIME, ms, unit, false);
    }

    static Result outOfRange(boolean negative, TimeUnit unit) {
      return new Result(Outcome.OUT_OF_RANGE, negative ? Long.MIN_VALUE : Long.MAX_VALUE, unit, negative);
    }

    static final Result NOT_A_TIME = new Result(Outcome.NOT_A_TIME, 0, null, false);
  }

  private static TimeUnit detect(long intDigits) {
    if (intDigits <= 11) {
      return TimeUnit.SECONDS;
    }
    if (intDigits <= 14) {
      return TimeUnit.MILLIS;
    }
    if (intDigits <= 17) {
      return TimeUnit.MICROS;
    }
    return TimeUnit.NANOS;
  }

  private static TimeUnit resolve(Unit unit, long intDigits) {
    switch (unit) {
      case SECONDS:
        return TimeUnit.SECONDS;
      case MILLIS:
        return TimeUnit.MILLIS;
      case MICROS:
        return TimeUnit.MICROS;
      case NANOS:
        return TimeUnit.NANOS;
      default:
        return detect(intDigits);
    }
  }

  /** A plain integer (the scanner's fast path). */
  static Result intToMs(long v, Unit unit) {
    TimeUnit u;
    if (unit == Unit.AUTO) {
      // |v| by magnitude; Long.MIN_VALUE's magnitude is above every threshold.
      boolean min = v == Long.MIN_VALUE;
      long a = min ? Long.MAX_VALUE : Math.abs(v);
      if (!min && a < 100_000_000_000L) {
        u = TimeUnit.SECONDS;
      } else if (!min && a < 100_000_000_000_000L) {
        u = TimeUnit.MILLIS;
      } else if (!min && a < 100_000_000_000_000_000L) {
        u = TimeUnit.MICROS;
      } else {
        u = TimeUnit.NANOS;
      }
    } else {
      u = resolve(unit, 0);
    }
    switch (u) {
      case SECONDS:
        try {
          return Result.time(Math.multiplyExact(v, 1000L), u);
        } catch (ArithmeticException overflow) {
          return Result.outOfRange(v < 0, u);
        }
      case MICROS:
        return Result.time(Math.floorDiv(v, 1000L), u);
      case NANOS:
        return Result.time(Math.floorDiv(v, 1_000_000L), u);
      default:
        return Result.time(v, u);
    }
  }

  private static final BigInteger TEN = BigInteger.TEN;
  private static final BigInteger LONG_MIN = BigInteger.valueOf(Long.MIN_VALUE);
  private static final BigInteger LONG_MAX = BigInteger.valueOf(Long.MAX_VALUE);
  private static final int MAX_MANTISSA_DIGITS = 36;

  /** A JSON number's text (already valid per the grammar). */
  static Result numberToMs(byte[] b, Unit unit) {
    int i = 0;
    boolean negative = b.length > 0 && b[0] == '-';
    if (negative) {
      i++;
    }
    int digitsEnd = i;
    while (digitsEnd < b.length && b[digitsEnd] >= '0' && b[digitsEnd] <= '9') {
      digitsEnd++;
    }
    if (digitsEnd == b.length && digitsEnd - i <= 18 && digitsEnd > i) {
      long v = 0;
      for (int k = i; k < digitsEnd; k++) {
        v = v * 10 + (b[k] - '0');
      }
      long intDigits = v == 0 ? 0 : digitsEnd - i;
      TimeUnit u = resolve(unit, intDigits);
      BigInteger mag;
      boolean frac;
      if (u.msShift >= 0) {
        mag = BigInteger.valueOf(v).multiply(TEN.pow(u.msShift));
        frac = false;
      } else {
        long d = u.msShift == -3 ? 1000 : 1_000_000;
        mag = BigInteger.valueOf(v / d);
        frac = v % d != 0;
      }
      return finish(mag, frac, negative, u);
    }
    // General path: mantissa digits (at most 36 significant) and a decimal exponent.
    BigInteger mantissa = BigInteger.ZERO;
    int sigDigits = 0;
    long exp10 = 0;
    boolean inexact = false;
    boolean seenNonzero = false;
    while (i < b.length && b[i] >= '0' && b[i] <= '9') {
      int d = b[i] - '0';
      if (d != 0 || seenNonzero) {
        seenNonzero = true;
        if (sigDigits < MAX_MANTISSA_DIGITS) {
          mantissa = mantissa.multiply(TEN).add(BigInteger.valueOf(d));
          sigDigits++;
        } else {
          exp10++;
          inexact |= d != 0;
        }
      }
      i++;
    }
    if (i < b.length && b[i] == '.') {
      i++;
      while (i < b.length && b[i] >= '0' && b[i] <= '9') {
        int d = b[i] - '0';
        if (d != 0 || seenNonzero) {
          seenNonzero = true;
          if (sigDigits < MAX_MANTISSA_DIGITS) {
            mantissa = mantissa.multiply(TEN).add(BigInteger.valueOf(d));
            sigDigits++;
            exp10--;
          } else {
            inexact |= d != 0;
          }
        } else {
          exp10--;
        }
        i++;
      }
    }
    if (i < b.length && (b[i] == 'e' || b[i] == 'E')) {
      i++;
      boolean eneg = i < b.length && b[i] == '-';
      if (i < b.length && (b[i] == '+' || b[i] == '-')) {
        i++;
      }
      long e = 0;
      while (i < b.length && b[i] >= '0' && b[i] <= '9') {
        // Clamped: anything beyond ±10^6 is far outside i64 ms either way.
        e = Math.min(e * 10 + (b[i] - '0'), 1_000_000);
        i++;
      }
      exp10 += eneg ? -e : e;
    }
    if (i != b.length) {
      return Result.NOT_A_TIME;
    }
    long intPartDigits = mantissa.signum() == 0 ? 0 : Math.max(sigDigits + exp10, 0);
    TimeUnit u = resolve(unit, intPartDigits);
    long e = exp10 + u.msShift;
    if (mantissa.signum() == 0) {
      return finish(BigInteger.ZERO, false, negative, u);
    }
    if (e >= 0) {
      if (e > 38) {
        return Result.outOfRange(negative, u);
      }
      return finish(mantissa.multiply(TEN.pow((int) e)), inexact, negative, u);
    }
    long ne = -e;
    if (ne > 38) {
      return finish(BigInteger.ZERO, true, negative, u);
    }
    BigInteger[] qr = mantissa.divideAndRemainder(TEN.pow((int) ne));
    return finish(qr[0], qr[1].signum() != 0 || inexact, negative, u);
  }

  private static Result finish(BigInteger mag, boolean frac, boolean negative, TimeUnit unit) {
    BigInteger v = negative ? mag.negate().subtract(frac ? BigInteger.ONE : BigInteger.ZERO) : mag;
    if (v.compareTo(LONG_MIN) < 0 || v.compareTo(LONG_MAX) > 0) {
      return Result.outOfRange(negative, unit);
    }
    return Result.time(v.longValueExact(), unit);
  }

  /** A time written as text: a decimal number (in {@code unit}) or an RFC 3339 date-time. */
  static Result textToMs(String text, Unit unit) {
    String t = RustStr.trim(text);
    byte[] b = t.getBytes(StandardCharsets.UTF_8);
    if (JsonScan.numberLen(b, 0, b.length) == b.length) {
      return numberToMs(b, unit);
    }
    long ms = rfc3339(b);
    if (ms == NOT_RFC3339) {
      return Result.NOT_A_TIME;
    }
    return Result.time(ms, TimeUnit.RFC3339);
  }

  private static final long NOT_RFC3339 = Long.MIN_VALUE;

  /**
   * chrono's {@code DateTime::parse_from_rfc3339} as epoch ms, or {@link #NOT_RFC3339}:
   * {@code YYYY-MM-DD}, then {@code T}, {@code t} or a space, {@code hh:mm:ss} (60 a
   * leap second), an optional fraction of any length (digits past the ninth ignored),
   * and {@code Z}, {@code z} or an offset {@code ±hh:mm} (U+2212 accepted as minus)
   * below 24 h.
   */
  static long rfc3339(byte[] s) {
    if (s.length < 19) {
      return NOT_RFC3339;
    }
    int[] digitsAt = {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18};
    for (int k : digitsAt) {
      if (s[k] < '0' || s[k] > '9') {
        return NOT_RFC3339;
      }
    }
    if (s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':') {
      return NOT_RFC3339;
    }
    if (s[10] != 'T' && s[10] != 't' && s[10] != ' ') {
      return NOT_RFC3339;
    }
    int year = d2(s, 0) * 100 + d2(s, 2);
    int month = d2(s, 5);
    int day = d2(s, 8);
    if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) {
      return NOT_RFC3339;
    }
    int hour = d2(s, 11);
    int min = d2(s, 14);
    int sec = d2(s, 17);
    long extraNanos = 0;
    if (sec == 60) {
      sec = 59;
      extraNanos = 1_000_000_000L;
    }
    int i = 19;
    long nano = extraNanos;
    if (i < s.length && s[i] == '.') {
      i++;
      int start = i;
      long v = 0;
      while (i < s.length && i - start < 9 && s[i] >= '0' && s[i] <= '9') {
        v = v * 10 + (s[i] - '0');
        i++;
      }
      int consumed = i - start;
      if (consumed == 0) {
        return NOT_RFC3339;
      }
      for (int k = consumed; k < 9; k++) {
        v *= 10;
      }
      while (i < s.length && s[i] >= '0' && s[i] <= '9') {
        i++;
      }
      nano += v;
    }
    if (hour >= 24 || min >= 60 || sec >= 60 || (nano >= 1_000_000_000L && sec != 59)) {
      return NOT_RFC3339;
    }
    // The offset.
    if (i >= s.length) {
      return NOT_RFC3339;
    }
    int offset;
    if (s[i] == 'Z' || s[i] == 'z') {
      offset = 0;
      i++;
    } else {
      boolean negative;
      if (s[i] == '+') {
        negative = false;
        i++;
      } else if (s[i] == '-') {
        negative = true;
        i++;
      } else if (i + 2 < s.length
          && (s[i] & 0xff) == 0xE2
          && (s[i + 1] & 0xff) == 0x88
          && (s[i + 2] & 0xff) == 0x92) {
        negative = true; // U+2212 MINUS SIGN
        i += 3;
      } else {
        return NOT_RFC3339;
      }
      if (i + 2 > s.length || !isDigit(s[i]) || !isDigit(s[i + 1])) {
        return NOT_RFC3339;
      }
      int oh = d2(s, i);
      i += 2;
      if (i >= s.length || s[i] != ':') {
        return NOT_RFC3339;
      }
      i++;
      if (i + 2 > s.length) {
        return NOT_RFC3339;
      }
      if (s[i] < '0' || s[i] > '5' || !isDigit(s[i + 1])) {
        return NOT_RFC3339;
      }
      int om = d2(s, i);
      i += 2;
      int seconds = oh * 3600 + om * 60;
      if (seconds >= 86_400) {
        return NOT_RFC3339;
      }
      offset = negative ? -seconds : seconds;
    }
    if (i != s.length) {
      return NOT_RFC3339;
    }
    long days = daysFromCivil(year, month, day);
    long epochSeconds = days * 86_400L + hour * 3600L + min * 60L + sec - offset;
    return epochSeconds * 1000L + nano / 1_000_000L;
  }

  private static boolean isDigit(byte c) {
    return c >= '0' && c <= '9';
  }

  private static int d2(byte[] s, int i) {
    return (s[i] - '0') * 10 + (s[i + 1] - '0');
  }

  private static int daysInMonth(int year, int month) {
    switch (month) {
      case 2:
        boolean leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        return leap ? 29 : 28;
      case 4:
      case 6:
      case 9:
      case 11:
        return 30;
      default:
        return 31;
    }
  }

  /** Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm). */
  private static long daysFromCivil(long y, int m, int d) {
    y -= m <= 2 ? 1 : 0;
    long era = Math.floorDiv(y, 400);
    long yoe = y - era * 400;
    long doy = (153L * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146_097 + doe - 719_468;
  }
}
