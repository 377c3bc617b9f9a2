//! The checks of a numeric match that its regex cannot express: Luhn for card numbers, unissued SSN ranges, IPv4
//! octets, dialable international phone numbers, and the registered length and mod-97 checksum of an IBAN.

use super::detect::{PiiKind, clear_after};

/// What the regex of a numeric kind cannot check.
pub(super) fn number_valid(kind: PiiKind, candidate: &str) -> bool {
    match kind {
        PiiKind::CardNumber => luhn_valid(candidate.as_bytes()),
        // Area 000, 666 and 900-999, group 00 and serial 0000 are never issued.
        PiiKind::Ssn => {
            // Written 3-2-4 with dashes or as one run of nine.
            let digits: Vec<u8> = candidate.bytes().filter(u8::is_ascii_digit).collect();
            let [a, b, c, d, e, f, g, h, i] = digits[..] else { return false };
            let (area, group, serial) = ([a, b, c], [d, e], [f, g, h, i]);
            &area != b"000" && &area != b"666" && a != b'9' && &group != b"00" && &serial != b"0000"
        }
        PiiKind::Ipv4 if candidate.contains(':') => ipv6_valid(candidate),
        PiiKind::Ipv4 => candidate.split('.').all(|octet| octet.parse::<u16>().is_ok_and(|n| n <= 255)),
        PiiKind::Phone if candidate.starts_with('+') => international_phone_valid(candidate),
        PiiKind::Phone if candidate.bytes().all(|b| b.is_ascii_digit()) => north_american_run_valid(candidate),
        PiiKind::Phone => true,
        PiiKind::Email | PiiKind::Iban => true,
    }
}

/// An IPv6 address with at least three groups written out (so `a::b` of a code path or a time like `12:30:45` is not
/// one).
fn ipv6_valid(candidate: &str) -> bool {
    candidate.split(':').filter(|group| !group.is_empty()).count() >= 3
        && candidate.parse::<std::net::Ipv6Addr>().is_ok()
}

/// The Luhn checksum over the digits of `candidate`, which must number 13 to 19.
fn luhn_valid(candidate: &[u8]) -> bool {
    let digits = candidate.iter().rev().filter(|b| b.is_ascii_digit()).map(|b| u32::from(b - b'0'));
    let (count, sum) = digits.enumerate().fold((0, 0), |(_, sum), (i, digit)| {
        let doubled = if i % 2 == 1 { digit * 2 } else { digit };
        (i + 1, sum + if doubled > 9 { doubled - 9 } else { doubled })
    });
    (13..=19).contains(&count) && sum % 10 == 0
}

/// Enough digits for a dialable number (8 to 15, E.164's maximum; exactly 11 for the North American `+1`, which stops
/// a following year or count from being swallowed), and not a quantity in thousands such as `+10 000 000`.
fn international_phone_valid(candidate: &str) -> bool {
    let digits = candidate.bytes().filter(u8::is_ascii_digit).count();
    let dialable = if candidate.starts_with("+1") { digits == 11 } else { (8..=15).contains(&digits) };
    let groups = || candidate.split([' ', '-']).filter(|group| !group.is_empty()).skip(1);
    let thousands = groups().count() >= 2 && groups().all(|group| group.len() == 3 && !group.contains(['(', ')']));
    dialable && !thousands
}

/// A run of 10 digits, or 11 starting with `1`, whose area code is not an N11 service code (`211` to `911`); the
/// regex saw to the rest of the North American shape.
fn north_american_run_valid(candidate: &str) -> bool {
    let national = candidate.strip_prefix('1').filter(|rest| rest.len() == 10).unwrap_or(candidate);
    national.len() == 10 && national.get(1..3) != Some("11")
}

/// Registered IBAN lengths per country (ISO 13616 registry).
const IBAN_LENGTHS: &str = "AD24 AE23 AL28 AT20 AZ28 BA20 BE16 BG22 BH22 BI27 BR29 BY28 CH21 CR22 CY28 CZ24 DE22 DJ27 \
    DK18 DO28 EE20 EG29 ES24 FI18 FK18 FO18 FR27 GB22 GE22 GI23 GL18 GR27 GT28 HR21 HU28 IE22 IL23 IQ23 IS26 IT27 JO30 \
    KW30 KZ20 LB28 LC32 LI21 LT20 LU20 LV21 LY25 MC27 MD24 ME22 MK19 MN20 MR27 MT31 MU30 NI28 NL18 NO15 OM23 PK24 PL28 \
    PS29 QA29 RO24 RS22 RU33 SA24 SC31 SD18 SE24 SI19 SK24 SM27 SO23 ST25 SV28 TL23 TN24 TR26 UA29 VA22 VG24 XK20 YE30";

/// Where the IBAN starting at `start` (two letters, two digits) ends, if one does: it has exactly the length its
/// country registers, written compact or in groups of four with single spaces, stands alone, and passes mod-97.
pub(super) fn iban_end(bytes: &[u8], start: usize) -> Option<usize> {
    let country = [bytes.get(start)?.to_ascii_uppercase(), bytes.get(start + 1)?.to_ascii_uppercase()];
    let entry = IBAN_LENGTHS.as_bytes().chunks(5).find(|entry| entry.get(..2) == Some(&country[..]))?;
    let length: usize = std::str::from_utf8(entry.get(2..4)?).ok()?.parse().ok()?;
    let spaced = bytes.get(start + 4) == Some(&b' ');
    let (mut cut, mut count) = (start, 0);
    while count < length {
        if spaced && count > 0 && count % 4 == 0 {
            if bytes.get(cut) != Some(&b' ') {
                return None;
            }
            cut += 1;
        }
        if !bytes.get(cut)?.is_ascii_alphanumeric() {
            return None;
        }
        (cut, count) = (cut + 1, count + 1);
    }
    if !clear_after(bytes, cut, b"") {
        return None;
    }
    // ISO 7064 mod 97-10: the first four characters move to the end, letters count as 10-35, remainder must be 1.
    let characters = || bytes[start..cut].iter().filter(|b| b.is_ascii_alphanumeric());
    let remainder = characters().skip(4).chain(characters().take(4)).fold(0u32, |acc, &b| match b {
        b'0'..=b'9' => (acc * 10 + u32::from(b - b'0')) % 97,
        _ => (acc * 100 + u32::from(b.to_ascii_uppercase() - b'A') + 10) % 97,
    });
    (remainder == 1).then_some(cut)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_redacted_as, assert_untouched, redact};
    use super::*;

    #[test]
    fn card_numbers_are_luhn_checked() {
        for card in
            ["4111111111111111", "4111 1111 1111 1111", "4111-1111-1111-1111", "3782 822463 10005", "5555555555554444"]
        {
            assert_redacted_as(card, "[CARD_NUMBER_1]");
        }
        assert_eq!(redact("card 4111 1111 1111 1111 exp 2027"), "card [CARD_NUMBER_1] exp 2027");
        assert_eq!(redact("4111 1111 1111 1111 2024"), "[CARD_NUMBER_1] 2024");
        // Invalid Luhn is just a number, and not a phone either.
        for text in ["4111111111111112", "4111 1111 1111 1112", "4111-1111-1111-1112", "41111111111111111111"] {
            assert_untouched(text);
        }
    }

    #[test]
    fn ssns_reject_unissued_ranges() {
        assert_eq!(redact("SSN 123-45-6789."), "SSN [SSN_1].");
        assert_eq!(redact("(078-05-1120)"), "([SSN_1])");
        for text in ["000-12-3456", "666-12-3456", "900-12-3456", "999-12-3456", "123-00-4567", "123-45-0000"] {
            assert_untouched(text);
        }
        assert_untouched("1123-45-6789 and 123-45-67890");
    }

    #[test]
    fn ipv4_addresses() {
        assert_eq!(redact("from 192.168.1.20 and 8.8.8.8."), "from [IP_ADDRESS_1] and [IP_ADDRESS_2].");
        assert_eq!(redact("10.0.0.1:8080, 10.0.0.0/8"), "[IP_ADDRESS_1]:8080, [IP_ADDRESS_2]/8");
        assert_eq!(redact("10.0.0.1,10.0.0.2"), "[IP_ADDRESS_1],[IP_ADDRESS_2]");
        for text in [
            "999.1.1.1",
            "256.1.1.1",
            "1.2.3.256",
            "version 1.2.3.4.5",
            "1.2.3.4.5.6.7.8",
            "v1.2.3.4",
            "1.2.3",
            "1.2.3.4567",
        ] {
            assert_untouched(text);
        }
    }

    #[test]
    fn ibans_are_mod_97_checked() {
        for iban in [
            "DE89370400440532013000",
            "DE89 3704 0044 0532 0130 00",
            "GB82 WEST 1234 5698 7654 32",
            "GB82WEST12345698765432",
            "NL91ABNA0417164300",
            "FR14 2004 1010 0505 0001 3M02 606",
            "NO9386011117947",
            "de89370400440532013000",
        ] {
            assert_redacted_as(iban, "[IBAN_1]");
        }
        assert_eq!(redact("IBAN: DE89 3704 0044 0532 0130 00 THEN pay"), "IBAN: [IBAN_1] THEN pay");
        assert_eq!(redact("ES91 2100 0418 4502 0005 1332 ABCD"), "[IBAN_1] ABCD");
        for text in [
            "DE88370400440532013000",
            "DE89 3704 0044 0532 0130 02",
            "XX89370400440532013000",
            "DE8937040044053201300",
            "ID DE89370400440532013000X",
            "AB12CDEFGHIJKLMNOP",
            "AB12 CDEF GHIJ KLMN OP",
            "DE89 3704 0044 0532 013000",
        ] {
            assert_untouched(text);
        }
        // A failed IBAN is not a shield: digits inside it that make a Luhn-valid card are still redacted as one,
        // since hiding a number too many is safer than leaking one.
        assert_eq!(redact("DE89 3704 0044 0532 0130 01"), "DE89 [CARD_NUMBER_1]");
    }

    #[test]
    fn iban_length_table_is_well_formed() {
        let entries: Vec<&[u8]> = IBAN_LENGTHS.as_bytes().chunks(5).collect();
        assert!(entries.len() > 80);
        for entry in entries {
            let (country, length) = entry.split_at(2);
            assert!(country.iter().all(u8::is_ascii_uppercase), "{entry:?}");
            let length: usize = std::str::from_utf8(&length[..2]).expect("ascii").parse().expect("a length");
            assert!((15..=34).contains(&length), "{entry:?}");
            assert!(entry.len() == 4 || entry[4] == b' ', "{entry:?}");
        }
    }
}
