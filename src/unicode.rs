//! Unicode properties the gateway checks text against, in one place: the code points that show nothing
//! (Default_Ignorable_Code_Point), which keyword matching removes before it compares (`guardrails/normalise.rs`), and
//! the ones that change how the text around them reads (bidi controls, line and paragraph separators), which a name
//! must not carry (contract 14: a name is shown in listings, logs and consoles, where such characters would make it
//! look like another). A leaf: it knows nothing of the gateway.

/// Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt, Unicode 16): characters that show nothing.
pub fn is_default_ignorable(c: char) -> bool {
    !c.is_ascii()
        && matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'..='\u{1160}'
                | '\u{17B4}'..='\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF0}'..='\u{FFF8}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// The bidi controls (Unicode's Bidi_Control property): the embeddings, overrides and isolates, and the implicit
/// marks (LRM, RLM, ALM). They reorder what is shown, so `abc\u{202E}txt.exe` reads as another name.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// U+2028 and U+2029: a new line to a reader (and to JavaScript before ES2019) that `char::is_control` does not see.
pub fn is_line_or_paragraph_separator(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties() {
        for c in ['\u{200B}', '\u{FEFF}', '\u{00AD}', '\u{202E}', '\u{E0041}', '\u{3164}'] {
            assert!(is_default_ignorable(c), "{c:?}");
        }
        for c in ['a', ' ', 'é', '\u{2028}', '\u{2800}'] {
            assert!(!is_default_ignorable(c), "{c:?}");
        }
        for c in ['\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}'] {
            assert!(is_bidi_control(c), "{c:?}");
        }
        assert!(!is_bidi_control('\u{200B}') && !is_bidi_control('\u{2065}') && !is_bidi_control('a'));
        assert!(is_line_or_paragraph_separator('\u{2028}') && is_line_or_paragraph_separator('\u{2029}'));
        assert!(!is_line_or_paragraph_separator('\n'));
    }
}
