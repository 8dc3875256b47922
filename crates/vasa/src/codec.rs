//! Values of the schema's types, decoded from a request's elements and
//! encoded into an answer, both against [`crate::schema`]: a request with an
//! element out of order, repeated, missing, of the wrong namespace or not
//! parseable as its type is refused with the element named; an answer is
//! written in the schema's order whatever order it was built in.

use base64::Engine as _;

use crate::schema::{type_def, Field, Ns, Ty, TypeDef, XSD_NS};
use crate::xml::{Element, XmlWriter};

/// A value of an element.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Long(i64),
    Int(i32),
    Bool(bool),
    /// Seconds since the Unix epoch, UTC.
    DateTime(i64),
    Base64(Vec<u8>),
    Struct(Struct),
    /// `xsi:nil="true"`.
    Nil,
}

/// A value of a complex type: its type's name and its elements by name.
#[derive(Debug, Clone, PartialEq)]
pub struct Struct {
    pub ty: &'static str,
    pub fields: Vec<(&'static str, Value)>,
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}
impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::Long(n)
    }
}
impl From<i32> for Value {
    fn from(n: i32) -> Value {
        Value::Int(n)
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}
impl From<Struct> for Value {
    fn from(s: Struct) -> Value {
        Value::Struct(s)
    }
}

/// A request that does not fit the schema: what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

impl Struct {
    pub fn new(ty: &'static str) -> Struct {
        debug_assert!(type_def(ty).is_some(), "type {ty} is not in the schema");
        Struct {
            ty,
            fields: Vec::new(),
        }
    }

    pub fn with(mut self, name: &'static str, value: impl Into<Value>) -> Struct {
        self.fields.push((name, value.into()));
        self
    }

    pub fn with_opt<V: Into<Value>>(self, name: &'static str, value: Option<V>) -> Struct {
        match value {
            Some(v) => self.with(name, v),
            None => self,
        }
    }

    pub fn with_all<V: Into<Value>>(
        mut self,
        name: &'static str,
        values: impl IntoIterator<Item = V>,
    ) -> Struct {
        self.fields
            .extend(values.into_iter().map(|v| (name, v.into())));
        self
    }

    /// Every value of the element `name`, in order (nils included).
    pub fn all(&self, name: &str) -> Vec<&Value> {
        self.fields
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .collect()
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields
            .iter()
            .find(|(n, v)| *n == name && !matches!(v, Value::Nil))
            .map(|(_, v)| v)
    }

    fn missing(&self, name: &str) -> DecodeError {
        DecodeError(format!("{} has no {name}", self.ty))
    }

    pub fn opt_str(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }

    pub fn str(&self, name: &str) -> Result<&str, DecodeError> {
        self.opt_str(name).ok_or_else(|| self.missing(name))
    }

    pub fn strs(&self, name: &str) -> Vec<&str> {
        self.all(name)
            .into_iter()
            .filter_map(|v| match v {
                Value::Str(s) => Some(s.as_str()),
                _ => None,
            })
            .collect()
    }

    pub fn opt_long(&self, name: &str) -> Option<i64> {
        match self.get(name) {
            Some(Value::Long(n)) => Some(*n),
            _ => None,
        }
    }

    pub fn long(&self, name: &str) -> Result<i64, DecodeError> {
        self.opt_long(name).ok_or_else(|| self.missing(name))
    }

    pub fn opt_bool(&self, name: &str) -> Option<bool> {
        match self.get(name) {
            Some(Value::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    pub fn child(&self, name: &str) -> Option<&Struct> {
        match self.get(name) {
            Some(Value::Struct(s)) => Some(s),
            _ => None,
        }
    }

    pub fn children(&self, name: &str) -> Vec<&Struct> {
        self.all(name)
            .into_iter()
            .filter_map(|v| match v {
                Value::Struct(s) => Some(s),
                _ => None,
            })
            .collect()
    }
}

// ---------------------------------------------------------------- decoding

/// Decodes the children of `element` as the sequence `fields` (each with the
/// namespace that declares it) into a value of type `ty`.
pub fn decode_sequence(
    ty: &'static str,
    element: &Element,
    fields: &[(Ns, &'static Field)],
) -> Result<Struct, DecodeError> {
    let mut out = Struct {
        ty,
        fields: Vec::new(),
    };
    let mut at = 0usize;
    let mut seen = 0usize;
    for child in &element.children {
        loop {
            let Some((ns, field)) = fields.get(at) else {
                return Err(DecodeError(format!(
                    "{ty}: unexpected element {}",
                    display_name(child)
                )));
            };
            if child.name.is(ns.uri(), field.name) {
                if seen == 1 && !field.many {
                    return Err(DecodeError(format!("{ty}: {} given twice", field.name)));
                }
                seen += 1;
                out.fields.push((field.name, decode_value(child, field)?));
                break;
            }
            if seen < usize::from(field.min_occurs) {
                return Err(DecodeError(format!(
                    "{ty}: {} is required before {}",
                    field.name,
                    display_name(child)
                )));
            }
            at += 1;
            seen = 0;
        }
    }
    for (i, (_, field)) in fields.iter().enumerate().skip(at) {
        let count = if i == at { seen } else { 0 };
        if count < usize::from(field.min_occurs) {
            return Err(DecodeError(format!("{ty}: {} is required", field.name)));
        }
    }
    Ok(out)
}

fn display_name(e: &Element) -> String {
    match &e.name.ns {
        Some(ns) => format!("{{{ns}}}{}", e.name.local),
        None => e.name.local.clone(),
    }
}

fn decode_value(element: &Element, field: &Field) -> Result<Value, DecodeError> {
    if element.nil {
        return Ok(Value::Nil);
    }
    let context = || field.name.to_string();
    match field.ty {
        Ty::Complex(declared) => {
            let def = effective_type(element, declared, &context())?;
            decode_struct(element, def)
        }
        Ty::Any => match &element.xsi_type {
            None => {
                no_children(element, &context())?;
                Ok(Value::Str(element.text.clone()))
            }
            Some(t) if t.ns.as_deref() == Some(XSD_NS) => {
                let ty = Ty::from_xsd_name(&t.local).ok_or_else(|| {
                    DecodeError(format!(
                        "{}: xsi:type xsd:{} is not accepted",
                        context(),
                        t.local
                    ))
                })?;
                no_children(element, &context())?;
                decode_simple(&element.text, ty, &context())
            }
            Some(_) => {
                let def = effective_type(element, "", &context())?;
                decode_struct(element, def)
            }
        },
        simple => {
            no_children(element, &context())?;
            if let Some(t) = &element.xsi_type {
                let same =
                    t.ns.as_deref() == Some(XSD_NS) && simple.xsd_name() == Some(t.local.as_str());
                if !same {
                    return Err(DecodeError(format!(
                        "{}: xsi:type {} is not a {simple:?}",
                        context(),
                        t.local
                    )));
                }
            }
            decode_simple(&element.text, simple, &context())
        }
    }
}

/// A value of a simple type is text: an element inside it is refused, not skipped.
fn no_children(element: &Element, context: &str) -> Result<(), DecodeError> {
    match element.children.first() {
        None => Ok(()),
        Some(child) => Err(DecodeError(format!(
            "{context}: a simple value holds no element ({} given)",
            display_name(child)
        ))),
    }
}

/// The type of an element of declared type `declared`: its `xsi:type` if it
/// names one derived from it (any schema type when `declared` is empty).
fn effective_type(
    element: &Element,
    declared: &str,
    context: &str,
) -> Result<&'static TypeDef, DecodeError> {
    let Some(t) = &element.xsi_type else {
        return type_def(declared).ok_or_else(|| DecodeError(format!("{context}: no type given")));
    };
    let def =
        t.ns.as_deref()
            .and_then(|ns| Ns::from_uri(ns.as_bytes()))
            .and_then(|ns| type_def(&t.local).filter(|d| d.ns == ns))
            .ok_or_else(|| DecodeError(format!("{context}: unknown xsi:type {}", t.local)))?;
    if !declared.is_empty() && !def.derives_from(declared) {
        return Err(DecodeError(format!(
            "{context}: xsi:type {} is not a {declared}",
            def.name
        )));
    }
    Ok(def)
}

fn decode_struct(element: &Element, def: &'static TypeDef) -> Result<Value, DecodeError> {
    Ok(Value::Struct(decode_sequence(
        def.name,
        element,
        def.all_fields(),
    )?))
}

fn decode_simple(text: &str, ty: Ty, context: &str) -> Result<Value, DecodeError> {
    let bad = |what: &str| {
        DecodeError(format!(
            "{context}: '{}' is not {what}",
            text.chars().take(64).collect::<String>().escape_debug()
        ))
    };
    let trimmed = text.trim();
    Ok(match ty {
        Ty::Str | Ty::Any => Value::Str(text.to_string()),
        Ty::Long => Value::Long(trimmed.parse().map_err(|_| bad("a long"))?),
        Ty::Int => Value::Int(trimmed.parse().map_err(|_| bad("an int"))?),
        Ty::Bool => Value::Bool(match trimmed {
            "true" | "1" => true,
            "false" | "0" => false,
            _ => return Err(bad("a boolean")),
        }),
        Ty::DateTime => Value::DateTime(parse_date_time(trimmed).ok_or_else(|| bad("a dateTime"))?),
        Ty::Base64 => {
            let compact: String = trimmed.chars().filter(|c| !c.is_whitespace()).collect();
            Value::Base64(
                base64::engine::general_purpose::STANDARD
                    .decode(compact)
                    .map_err(|_| bad("base64"))?,
            )
        }
        Ty::Complex(_) => unreachable!("complex types are decoded as structs"),
    })
}

// ---------------------------------------------------------------- encoding

/// A value that does not fit its type (a bug of the caller, answered as a
/// StorageFault rather than as a document that breaks the schema).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("answer does not fit the schema: {0}")]
pub struct EncodeError(pub String);

/// Writes `value` as the element `<prefix:name>` of declared type `ty`.
pub fn encode_element(
    w: &mut XmlWriter,
    ns: Ns,
    field: &Field,
    value: &Value,
) -> Result<(), EncodeError> {
    let (prefix, local) = (ns.prefix(), field.name);
    match (field.ty, value) {
        (_, Value::Nil) => {
            w.empty_q(prefix, local, &[("xsi:nil", "true")]);
            Ok(())
        }
        (Ty::Complex(declared), Value::Struct(s)) => {
            let def = type_def(s.ty).ok_or_else(|| EncodeError(format!("no type {}", s.ty)))?;
            if !def.derives_from(declared) {
                return Err(EncodeError(format!("{} is not a {declared}", s.ty)));
            }
            let xsi_type = (s.ty != declared).then(|| format!("{}:{}", def.ns.prefix(), def.name));
            encode_struct(w, (prefix, local), xsi_type.as_deref(), def, s)
        }
        (Ty::Any, Value::Struct(s)) => {
            let def = type_def(s.ty).ok_or_else(|| EncodeError(format!("no type {}", s.ty)))?;
            let xsi_type = format!("{}:{}", def.ns.prefix(), def.name);
            encode_struct(w, (prefix, local), Some(&xsi_type), def, s)
        }
        (Ty::Any, simple) => {
            let ty = simple_type_of(simple);
            let xsi_type = format!("xsd:{}", ty.xsd_name().expect("simple"));
            w.leaf_q(
                prefix,
                local,
                &[("xsi:type", &xsi_type)],
                &simple_text(simple),
            );
            Ok(())
        }
        (declared, simple) if simple_type_of(simple) == declared => {
            w.leaf_q(prefix, local, &[], &simple_text(simple));
            Ok(())
        }
        (declared, other) => Err(EncodeError(format!(
            "{}: {other:?} is not a {declared:?}",
            field.name
        ))),
    }
}

fn encode_struct(
    w: &mut XmlWriter,
    (prefix, local): (&str, &str),
    xsi_type: Option<&str>,
    def: &TypeDef,
    s: &Struct,
) -> Result<(), EncodeError> {
    let fields = def.all_fields();
    if let Some((unknown, _)) = s
        .fields
        .iter()
        .find(|(n, _)| !fields.iter().any(|(_, f)| f.name == *n))
    {
        return Err(EncodeError(format!(
            "{} has no element {unknown}",
            def.name
        )));
    }
    match xsi_type {
        Some(t) => w.start_q(prefix, local, &[("xsi:type", t)]),
        None => w.start_q(prefix, local, &[]),
    }
    encode_fields(w, def.name, fields, s)?;
    w.end_q(prefix, local);
    Ok(())
}

/// Writes the elements of `s` in the order of `fields`, checking how often each occurs.
pub fn encode_fields(
    w: &mut XmlWriter,
    context: &str,
    fields: &[(Ns, &'static Field)],
    s: &Struct,
) -> Result<(), EncodeError> {
    for (ns, field) in fields {
        let mut count = 0usize;
        for value in s.all(field.name) {
            count += 1;
            if count > 1 && !field.many {
                return Err(EncodeError(format!(
                    "{context}: {} more than once",
                    field.name
                )));
            }
            encode_element(w, *ns, field, value)?;
        }
        if count < usize::from(field.min_occurs) {
            return Err(EncodeError(format!(
                "{context}: {} is required",
                field.name
            )));
        }
    }
    Ok(())
}

fn simple_type_of(value: &Value) -> Ty {
    match value {
        Value::Str(_) => Ty::Str,
        Value::Long(_) => Ty::Long,
        Value::Int(_) => Ty::Int,
        Value::Bool(_) => Ty::Bool,
        Value::DateTime(_) => Ty::DateTime,
        Value::Base64(_) => Ty::Base64,
        Value::Struct(_) | Value::Nil => Ty::Any,
    }
}

fn simple_text(value: &Value) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    match value {
        Value::Str(s) => Cow::Borrowed(s),
        Value::Long(n) => Cow::Owned(n.to_string()),
        Value::Int(n) => Cow::Owned(n.to_string()),
        Value::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        Value::DateTime(s) => Cow::Owned(format_date_time(*s)),
        Value::Base64(bytes) => Cow::Owned(base64::engine::general_purpose::STANDARD.encode(bytes)),
        Value::Struct(_) | Value::Nil => Cow::Borrowed(""),
    }
}

// ---------------------------------------------------------------- xs:dateTime

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_date_time(unix_s: i64) -> String {
    let (days, secs) = (unix_s.div_euclid(86_400), unix_s.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction][Z|±HH:MM]` (no zone: UTC).
pub fn parse_date_time(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(range)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &fraction[digits..];
    }
    let offset_s = match rest {
        "" | "Z" => 0,
        zone if zone.len() == 6
            && (zone.starts_with('+') || zone.starts_with('-'))
            && &zone[3..4] == ":" =>
        {
            let h: i64 = zone[1..3].parse().ok()?;
            let m: i64 = zone[4..6].parse().ok()?;
            let s = (h * 60 + m) * 60;
            if zone.starts_with('+') {
                s
            } else {
                -s
            }
        }
        _ => return None,
    };
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset_s)
}

#[cfg(test)]
mod tests;
