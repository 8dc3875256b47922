//! Writes XML into a string, escaping text and attribute values.

#[derive(Debug, Default)]
pub struct XmlWriter {
    out: String,
}

impl XmlWriter {
    pub fn new() -> XmlWriter {
        XmlWriter {
            out: String::with_capacity(16 << 10),
        }
    }

    pub fn declaration(&mut self) {
        self.out
            .push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    }

    /// `<name attr="value" ...>`; names are written as given.
    pub fn start(&mut self, name: &str, attrs: &[(&str, &str)]) {
        self.open(name, attrs);
        self.out.push('>');
    }

    /// `<name attr="value" .../>`.
    pub fn empty(&mut self, name: &str, attrs: &[(&str, &str)]) {
        self.open(name, attrs);
        self.out.push_str("/>");
    }

    fn open(&mut self, name: &str, attrs: &[(&str, &str)]) {
        self.out.push('<');
        self.name_and_attributes(name, attrs);
    }

    fn name_and_attributes(&mut self, name: &str, attrs: &[(&str, &str)]) {
        debug_assert!(is_name(name), "{name:?} is not an XML name");
        self.out.push_str(name);
        for (key, value) in attrs {
            debug_assert!(is_name(key), "{key:?} is not an XML name");
            self.out.push(' ');
            self.out.push_str(key);
            self.out.push_str("=\"");
            escape_into(&mut self.out, value, true);
            self.out.push('"');
        }
    }

    /// `<prefix:local attr="value" ...>`, without making the name a string first.
    pub fn start_q(&mut self, prefix: &str, local: &str, attrs: &[(&str, &str)]) {
        self.open_q(prefix, local, attrs);
        self.out.push('>');
    }

    /// `<prefix:local attr="value" .../>`.
    pub fn empty_q(&mut self, prefix: &str, local: &str, attrs: &[(&str, &str)]) {
        self.open_q(prefix, local, attrs);
        self.out.push_str("/>");
    }

    fn open_q(&mut self, prefix: &str, local: &str, attrs: &[(&str, &str)]) {
        debug_assert!(is_name(prefix) && is_name(local), "{prefix:?}:{local:?}");
        self.out.push('<');
        self.out.push_str(prefix);
        self.out.push(':');
        self.name_and_attributes(local, attrs);
    }

    pub fn end_q(&mut self, prefix: &str, local: &str) {
        self.out.push_str("</");
        self.out.push_str(prefix);
        self.out.push(':');
        self.out.push_str(local);
        self.out.push('>');
    }

    /// `<prefix:local>text</prefix:local>`.
    pub fn leaf_q(&mut self, prefix: &str, local: &str, attrs: &[(&str, &str)], text: &str) {
        self.start_q(prefix, local, attrs);
        self.text(text);
        self.end_q(prefix, local);
    }

    pub fn end(&mut self, name: &str) {
        self.out.push_str("</");
        self.out.push_str(name);
        self.out.push('>');
    }

    pub fn text(&mut self, text: &str) {
        escape_into(&mut self.out, text, false);
    }

    /// `<name>text</name>`.
    pub fn leaf(&mut self, name: &str, attrs: &[(&str, &str)], text: &str) {
        self.start(name, attrs);
        self.text(text);
        self.end(name);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'-' | b'.'))
}

/// Escapes markup, and characters XML 1.0 cannot carry become U+FFFD.
fn escape_into(out: &mut String, text: &str, attribute: bool) {
    // Most text needs nothing: no markup, no control character, and none of
    // the lead bytes 0xEF (U+FFFE, U+FFFF), 0xC2 (U+0085) or 0xE2 (U+2028).
    let plain = text
        .bytes()
        .all(|b| b >= 0x20 && !matches!(b, b'<' | b'>' | b'&' | b'"' | 0xC2 | 0xE2 | 0xEF));
    if plain {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' if attribute => out.push_str("&quot;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            // Characters XML 1.1 would read as line ends travel as references.
            '\u{85}' => out.push_str("&#133;"),
            '\u{2028}' => out.push_str("&#8232;"),
            '\t' | '\n' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attributes_are_escaped_and_parse_back() {
        let mut w = XmlWriter::new();
        w.start("a", &[("k", "x\"<&>\ny")]);
        w.leaf("b", &[], "1 < 2 & \"3\" \r\u{1}");
        w.end("a");
        let text = w.finish();
        assert_eq!(
            text,
            "<a k=\"x&quot;&lt;&amp;&gt;&#10;y\"><b>1 &lt; 2 &amp; \"3\" &#13;\u{fffd}</b></a>"
        );
        let root = crate::xml::parse(text.as_bytes(), crate::xml::Limits::default()).unwrap();
        assert_eq!(root.children[0].text, "1 < 2 & \"3\" \r\u{fffd}");
    }

    #[test]
    fn characters_xml_1_1_reads_as_line_ends_travel_as_references() {
        let mut w = XmlWriter::new();
        w.leaf("a", &[("k", "\u{85}\u{2028}")], "p\u{85}q\u{2028}r\u{a9}");
        let text = w.finish();
        assert_eq!(text, "<a k=\"&#133;&#8232;\">p&#133;q&#8232;r\u{a9}</a>");
        let root = crate::xml::parse(text.as_bytes(), crate::xml::Limits::default()).unwrap();
        assert_eq!(root.text, "p\u{85}q\u{2028}r\u{a9}");
        assert_eq!(root.attributes[0].1, "\u{85}\u{2028}");
    }
}
