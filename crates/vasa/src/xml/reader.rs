//! Parses a document into an [`Element`] tree with names resolved to their
//! namespaces. A request is small and arrives whole, so a tree is simpler
//! than a stream and costs little; the [`Limits`] bound its depth, its
//! element count and its text, and a DOCTYPE is refused outright (no entity
//! beyond XML's five and character references is ever expanded).

use quick_xml::events::Event;
use quick_xml::name::{QName, ResolveResult};
use quick_xml::NsReader;

use crate::schema::XSI_NS;

/// An element's name: its namespace URI (none when unqualified) and local name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QualifiedName {
    pub ns: Option<String>,
    pub local: String,
}

impl QualifiedName {
    pub fn is(&self, ns: &str, local: &str) -> bool {
        self.ns.as_deref() == Some(ns) && self.local == local
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    pub name: QualifiedName,
    /// `xsi:type`, resolved.
    pub xsi_type: Option<QualifiedName>,
    /// `xsi:nil="true"`.
    pub nil: bool,
    /// Every attribute but namespace declarations, resolved, with its value.
    pub attributes: Vec<(QualifiedName, String)>,
    pub children: Vec<Element>,
    /// The text directly inside (whitespace between child elements included).
    pub text: String,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_depth: usize,
    pub max_elements: usize,
    pub max_text_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 32,
            max_elements: 500_000,
            max_text_bytes: 16 << 20,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XmlError {
    #[error("malformed XML: {0}")]
    Malformed(String),
    #[error("a DOCTYPE is not accepted")]
    Doctype,
    #[error("elements nested deeper than {0}")]
    TooDeep(usize),
    #[error("more than {0} elements")]
    TooManyElements(usize),
    #[error("more than {0} bytes of text")]
    TooMuchText(usize),
    #[error("no root element")]
    Empty,
}

fn malformed(e: impl std::fmt::Display) -> XmlError {
    XmlError::Malformed(e.to_string())
}

/// XML 1.0's `Char`: tab, newline, carriage return, and from U+0020 on but
/// U+FFFE and U+FFFF (a Rust `char` is never a surrogate). Anything else in
/// a document, literal or by reference, makes it malformed.
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{fffe}' && c != '\u{ffff}')
}

fn check_chars(text: &str) -> Result<(), XmlError> {
    match text.chars().find(|&c| !is_xml_char(c)) {
        None => Ok(()),
        Some(c) => Err(XmlError::Malformed(format!(
            "character U+{:04X} is not allowed in XML",
            c as u32
        ))),
    }
}

fn resolved(result: ResolveResult, local: &[u8]) -> Result<QualifiedName, XmlError> {
    let ns = match result {
        ResolveResult::Bound(ns) => {
            Some(String::from_utf8(ns.as_ref().to_vec()).map_err(malformed)?)
        }
        ResolveResult::Unbound => None,
        ResolveResult::Unknown(prefix) => {
            return Err(XmlError::Malformed(format!(
                "undeclared namespace prefix '{}'",
                String::from_utf8_lossy(&prefix)
            )))
        }
    };
    Ok(QualifiedName {
        ns,
        local: String::from_utf8(local.to_vec()).map_err(malformed)?,
    })
}

struct Parser<'a> {
    reader: NsReader<&'a [u8]>,
    limits: Limits,
    elements: usize,
    text_bytes: usize,
}

impl Parser<'_> {
    fn open(&mut self, start: &quick_xml::events::BytesStart) -> Result<Element, XmlError> {
        self.elements += 1;
        if self.elements > self.limits.max_elements {
            return Err(XmlError::TooManyElements(self.limits.max_elements));
        }
        let (result, local) = self.reader.resolve_element(start.name());
        let name = resolved(result, local.as_ref())?;
        let mut element = Element {
            name,
            xsi_type: None,
            nil: false,
            attributes: Vec::new(),
            children: Vec::new(),
            text: String::new(),
        };
        for attr in start.attributes() {
            let attr = attr.map_err(malformed)?;
            if attr.key.as_namespace_binding().is_some() {
                continue;
            }
            let (result, local) = self.reader.resolve_attribute(attr.key);
            let is_xsi =
                matches!(result, ResolveResult::Bound(ns) if ns.as_ref() == XSI_NS.as_bytes());
            let value = attr.unescape_value().map_err(malformed)?;
            check_chars(&value)?;
            element
                .attributes
                .push((resolved(result, local.as_ref())?, value.to_string()));
            if !is_xsi {
                continue;
            }
            match local.as_ref() {
                b"type" => {
                    let value = value.trim();
                    let (result, local) = self.reader.resolve_element(QName(value.as_bytes()));
                    element.xsi_type = Some(resolved(result, local.as_ref())?);
                }
                b"nil" => element.nil = matches!(value.trim(), "true" | "1"),
                _ => {}
            }
        }
        Ok(element)
    }

    fn add_text(&mut self, to: &mut Element, text: &str) -> Result<(), XmlError> {
        check_chars(text)?;
        self.text_bytes += text.len();
        if self.text_bytes > self.limits.max_text_bytes {
            return Err(XmlError::TooMuchText(self.limits.max_text_bytes));
        }
        to.text.push_str(text);
        Ok(())
    }

    fn parse(&mut self) -> Result<Element, XmlError> {
        let mut stack: Vec<Element> = Vec::new();
        loop {
            let event = self.reader.read_event().map_err(malformed)?;
            match event {
                Event::Start(start) => {
                    if stack.len() >= self.limits.max_depth {
                        return Err(XmlError::TooDeep(self.limits.max_depth));
                    }
                    let element = self.open(&start)?;
                    stack.push(element);
                }
                Event::Empty(start) => {
                    if stack.len() >= self.limits.max_depth {
                        return Err(XmlError::TooDeep(self.limits.max_depth));
                    }
                    let element = self.open(&start)?;
                    match stack.last_mut() {
                        Some(parent) => parent.children.push(element),
                        None => return self.finish(element),
                    }
                }
                Event::End(_) => {
                    let element = stack
                        .pop()
                        .ok_or_else(|| malformed("an end tag with no start"))?;
                    match stack.last_mut() {
                        Some(parent) => parent.children.push(element),
                        None => return self.finish(element),
                    }
                }
                Event::Text(text) => {
                    // XML 1.0 line ends only: quick-xml's `xml_content` also folds
                    // U+0085 and U+2028 (XML 1.1), which 1.0 keeps as characters.
                    let text = text.xml10_content().map_err(malformed)?;
                    match stack.last_mut() {
                        Some(top) => self.add_text(top, &text)?,
                        None if text.trim().is_empty() => {}
                        None => return Err(malformed("text outside the root element")),
                    }
                }
                Event::CData(data) => {
                    let text = data.xml10_content().map_err(malformed)?.into_owned();
                    let top = stack
                        .last_mut()
                        .ok_or_else(|| malformed("CDATA outside the root element"))?;
                    self.add_text(top, &text)?;
                }
                Event::GeneralRef(reference) => {
                    let text = resolve_reference(&reference)?;
                    let top = stack
                        .last_mut()
                        .ok_or_else(|| malformed("a reference outside the root element"))?;
                    self.add_text(top, text.encode_utf8(&mut [0; 4]))?;
                }
                Event::DocType(_) => return Err(XmlError::Doctype),
                Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
                Event::Eof => {
                    return Err(if stack.is_empty() {
                        XmlError::Empty
                    } else {
                        malformed("the document ends inside an element")
                    })
                }
            }
        }
    }

    /// After the root element only whitespace, comments and PIs may follow.
    fn finish(&mut self, root: Element) -> Result<Element, XmlError> {
        loop {
            match self.reader.read_event().map_err(malformed)? {
                Event::Eof => return Ok(root),
                Event::Text(t) if t.iter().all(u8::is_ascii_whitespace) => {}
                Event::Comment(_) | Event::PI(_) => {}
                _ => return Err(malformed("content after the root element")),
            }
        }
    }
}

/// XML's five predefined entities and character references; nothing else.
fn resolve_reference(reference: &quick_xml::events::BytesRef) -> Result<char, XmlError> {
    if reference.is_char_ref() {
        return match reference.resolve_char_ref() {
            Ok(Some(c)) if c != '\0' => Ok(c),
            _ => Err(malformed("an invalid character reference")),
        };
    }
    let name = reference.decode().map_err(malformed)?;
    Ok(match name.as_ref() {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "apos" => '\'',
        "quot" => '"',
        other => {
            return Err(XmlError::Malformed(format!(
                "undefined entity '&{};'",
                other.escape_debug()
            )))
        }
    })
}

/// Parses `bytes` (UTF-8) into its root element.
pub fn parse(bytes: &[u8], limits: Limits) -> Result<Element, XmlError> {
    let text = std::str::from_utf8(bytes).map_err(|e| malformed(format!("not UTF-8: {e}")))?;
    let mut parser = Parser {
        reader: NsReader::from_str(text),
        limits,
        elements: 0,
        text_bytes: 0,
    };
    parser.parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_to_namespaces_and_xsi_attributes_are_read() {
        let doc = br#"<?xml version="1.0"?>
            <a:root xmlns:a="urn:a" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:x="http://www.w3.org/2001/XMLSchema">
              <child xmlns="urn:b" xsi:type="x:string">t &amp; u</child>
              <a:empty xsi:nil="true"/>
            </a:root>"#;
        let root = parse(doc, Limits::default()).unwrap();
        assert!(root.name.is("urn:a", "root"));
        assert_eq!(root.children.len(), 2);
        let child = &root.children[0];
        assert!(child.name.is("urn:b", "child"));
        assert_eq!(child.text, "t & u");
        assert!(child.xsi_type.as_ref().unwrap().is(XSD, "string"));
        assert!(root.children[1].nil);
    }

    const XSD: &str = "http://www.w3.org/2001/XMLSchema";

    #[test]
    fn bad_documents_are_refused_with_their_reason() {
        type Expect = fn(&XmlError) -> bool;
        let cases: &[(&[u8], Expect)] = &[
            (b"<a><b></a>", |e| matches!(e, XmlError::Malformed(_))),
            (b"<a>", |e| matches!(e, XmlError::Malformed(_))),
            (b"", |e| matches!(e, XmlError::Empty)),
            (b"<p:a/>", |e| matches!(e, XmlError::Malformed(_))),
            (b"<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>", |e| {
                matches!(e, XmlError::Doctype)
            }),
            (b"<a>&x;</a>", |e| matches!(e, XmlError::Malformed(_))),
            (b"<a/><b/>", |e| matches!(e, XmlError::Malformed(_))),
            (b"<a>\xff</a>", |e| matches!(e, XmlError::Malformed(_))),
            // Characters XML 1.0 cannot carry, literal or by reference (a
            // NUL read as text wrote back as U+FFFD: found by fuzzing).
            (b"<a>rf\0x</a>", |e| matches!(e, XmlError::Malformed(_))),
            (b"<a>&#1;</a>", |e| matches!(e, XmlError::Malformed(_))),
            (b"<a k=\"&#x1F;\"/>", |e| {
                matches!(e, XmlError::Malformed(_))
            }),
            (b"<a k=\"\x0b\"/>", |e| matches!(e, XmlError::Malformed(_))),
            (b"<a><![CDATA[\x0c]]></a>", |e| {
                matches!(e, XmlError::Malformed(_))
            }),
            ("<a>\u{ffff}</a>".as_bytes(), |e| {
                matches!(e, XmlError::Malformed(_))
            }),
        ];
        for (doc, expect) in cases {
            let error = parse(doc, Limits::default()).unwrap_err();
            assert!(
                expect(&error),
                "{}: {error:?}",
                String::from_utf8_lossy(doc)
            );
        }
    }

    #[test]
    fn every_character_xml_allows_is_read() {
        let root = parse(
            "<a k=\"\t\u{e000}\">\t\r\n \u{d7ff}\u{fffd}\u{10000}&#9;</a>".as_bytes(),
            Limits::default(),
        )
        .unwrap();
        // XML reads a CR LF as one LF.
        assert_eq!(root.text, "\t\n \u{d7ff}\u{fffd}\u{10000}\t");
        assert_eq!(root.attributes[0].1, "\t\u{e000}");
    }

    #[test]
    fn line_ends_are_xml_1_0s() {
        // U+0085 and U+2028 are characters in XML 1.0, not line ends; a CR LF
        // is one LF in CDATA as in text.
        let root = parse(
            "<a>p\u{85}q\u{2028}r\r\n<![CDATA[s\r\nt\u{85}]]></a>".as_bytes(),
            Limits::default(),
        )
        .unwrap();
        assert_eq!(root.text, "p\u{85}q\u{2028}r\ns\nt\u{85}");
    }

    #[test]
    fn limits_bound_depth_count_and_text() {
        let limits = Limits {
            max_depth: 4,
            max_elements: 10,
            max_text_bytes: 8,
        };
        let deep = "<a>".repeat(5) + &"</a>".repeat(5);
        assert_eq!(parse(deep.as_bytes(), limits), Err(XmlError::TooDeep(4)));
        let wide = format!("<a>{}</a>", "<b/>".repeat(10));
        assert_eq!(
            parse(wide.as_bytes(), limits),
            Err(XmlError::TooManyElements(10))
        );
        assert_eq!(
            parse(b"<a>123456789</a>", limits),
            Err(XmlError::TooMuchText(8))
        );
        assert!(parse(b"<a><b>1234</b><b/></a>", limits).is_ok());
    }
}
