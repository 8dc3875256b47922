//! SOAP 1.1 envelopes: finding the operation and its parameters in a
//! request, and writing an answer or a fault. Document/literal wrapped: the
//! Body holds one element named after the operation; the answer's Body holds
//! `<op>Response` with its `return` elements, or nothing for an operation
//! without a result. An operation without required parameters may arrive
//! with an empty Body, named only by its SOAPAction (`urn:<op>`).

use crate::codec::{self, Struct, Value};
use crate::fault::Fault;
use crate::schema::{self, Ns, Operation, XSD_NS, XSI_NS};
use crate::xml::{self, Element, Limits, XmlWriter};

pub const ENVELOPE_NS: &str = "http://schemas.xmlsoap.org/soap/envelope/";
const SOAP12_ENVELOPE_NS: &str = "http://www.w3.org/2003/05/soap-envelope";

/// What is wrong with a request, as SOAP 1.1 classes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvelopeFault {
    /// Not a SOAP 1.1 envelope (SOAP 1.2's, or another namespace).
    VersionMismatch(String),
    /// A header the provider must understand and does not.
    MustUnderstand(String),
    /// Malformed XML, no Body, an unknown operation: the sender's fault.
    Client(String),
    /// A VASA fault of the operation.
    Vasa(Fault),
}

/// A request: its operation and parameters.
#[derive(Debug)]
pub struct Call {
    pub operation: &'static Operation,
    pub params: Struct,
}

/// The type name given to an operation's parameters.
pub const PARAMS: &str = "parameters";

pub fn limits() -> Limits {
    Limits::default()
}

/// Reads a request. `soap_action` is the HTTP header's value, if any.
pub fn read_request(body: &[u8], soap_action: Option<&str>) -> Result<Call, EnvelopeFault> {
    let root = xml::parse(body, limits()).map_err(|e| EnvelopeFault::Client(e.to_string()))?;
    if root.name.local != "Envelope" || root.name.ns.as_deref() != Some(ENVELOPE_NS) {
        let what = match root.name.ns.as_deref() {
            Some(SOAP12_ENVELOPE_NS) => {
                "a SOAP 1.2 envelope: this provider speaks SOAP 1.1".to_string()
            }
            Some(ns) => format!("{{{ns}}}{} is not a SOAP 1.1 envelope", root.name.local),
            None => format!("{} is not a SOAP 1.1 envelope", root.name.local),
        };
        return Err(EnvelopeFault::VersionMismatch(what));
    }
    let mut body_element = None;
    for child in &root.children {
        if child.name.is(ENVELOPE_NS, "Header") {
            check_headers(child)?;
        } else if child.name.is(ENVELOPE_NS, "Body") && body_element.is_none() {
            body_element = Some(child);
        } else {
            return Err(EnvelopeFault::Client(format!(
                "unexpected {} in the envelope",
                child.name.local
            )));
        }
    }
    let body_element =
        body_element.ok_or_else(|| EnvelopeFault::Client("the envelope has no Body".into()))?;
    match body_element.children.as_slice() {
        [] => {
            let name = soap_action
                .map(|a| a.trim().trim_matches('"'))
                .and_then(|a| a.strip_prefix("urn:"))
                .ok_or_else(|| EnvelopeFault::Client("an empty Body and no SOAPAction".into()))?;
            let operation = schema::operation(name)
                .filter(|o| o.input.iter().all(|f| f.min_occurs == 0))
                .ok_or_else(|| {
                    EnvelopeFault::Client(format!("unknown operation '{}'", name.escape_debug()))
                })?;
            Ok(Call {
                operation,
                params: Struct {
                    ty: PARAMS,
                    fields: Vec::new(),
                },
            })
        }
        [element] => read_operation(element),
        _ => Err(EnvelopeFault::Client(
            "the Body holds more than one element".into(),
        )),
    }
}

fn check_headers(header: &Element) -> Result<(), EnvelopeFault> {
    for entry in &header.children {
        let must = entry
            .attributes
            .iter()
            .any(|(name, value)| name.is(ENVELOPE_NS, "mustUnderstand") && value.trim() == "1");
        if must {
            return Err(EnvelopeFault::MustUnderstand(format!(
                "header {} is not understood",
                entry.name.local
            )));
        }
    }
    Ok(())
}

fn read_operation(element: &Element) -> Result<Call, EnvelopeFault> {
    let unknown = || {
        EnvelopeFault::Client(format!(
            "unknown operation {{{}}}{}",
            element.name.ns.as_deref().unwrap_or(""),
            element.name.local
        ))
    };
    if element.name.ns.as_deref() != Some(Ns::Vasa.uri()) {
        return Err(unknown());
    }
    let operation = schema::operation(&element.name.local).ok_or_else(unknown)?;
    let fields: Vec<_> = operation.input.iter().map(|f| (Ns::Vasa, f)).collect();
    let params = codec::decode_sequence(PARAMS, element, &fields)
        .map_err(|e| EnvelopeFault::Vasa(Fault::from(e)))?;
    Ok(Call { operation, params })
}

fn envelope_start(w: &mut XmlWriter) {
    w.declaration();
    let mut attrs: Vec<(String, &str)> = vec![
        ("xmlns:soapenv".into(), ENVELOPE_NS),
        ("xmlns:xsi".into(), XSI_NS),
        ("xmlns:xsd".into(), XSD_NS),
    ];
    for ns in Ns::ALL {
        attrs.push((format!("xmlns:{}", ns.prefix()), ns.uri()));
    }
    let attrs: Vec<(&str, &str)> = attrs.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    w.start("soapenv:Envelope", &attrs);
    w.start("soapenv:Body", &[]);
}

fn envelope_end(mut w: XmlWriter) -> String {
    w.end("soapenv:Body");
    w.end("soapenv:Envelope");
    w.finish()
}

/// A request for `call` as a client would send it (the fuzz target checks
/// that every request read writes back to one read the same).
pub fn write_request(call: &Call) -> Result<String, codec::EncodeError> {
    let mut w = XmlWriter::new();
    envelope_start(&mut w);
    let name = format!("vasa:{}", call.operation.name);
    w.start(&name, &[]);
    let fields: Vec<_> = call.operation.input.iter().map(|f| (Ns::Vasa, f)).collect();
    codec::encode_fields(&mut w, call.operation.name, &fields, &call.params)?;
    w.end(&name);
    Ok(envelope_end(w))
}

/// The answer to `operation`: its `return` values (none for an operation
/// without a result).
pub fn write_response(
    operation: &'static Operation,
    returns: Vec<Value>,
) -> Result<String, codec::EncodeError> {
    let mut w = XmlWriter::new();
    envelope_start(&mut w);
    match &operation.output {
        None => {
            if !returns.is_empty() {
                return Err(codec::EncodeError(format!(
                    "{} has no result",
                    operation.name
                )));
            }
        }
        Some(field) => {
            let name = format!("vasa:{}Response", operation.name);
            w.start(&name, &[]);
            let s = Struct {
                ty: PARAMS,
                fields: returns.into_iter().map(|v| ("return", v)).collect(),
            };
            codec::encode_fields(&mut w, operation.name, &[(Ns::Vasa, field)], &s)?;
            w.end(&name);
        }
    }
    Ok(envelope_end(w))
}

/// A SOAP Fault; a VASA fault carries its type in the detail.
pub fn write_fault(fault: &EnvelopeFault) -> String {
    let mut w = XmlWriter::new();
    envelope_start(&mut w);
    w.start("soapenv:Fault", &[]);
    let (code, message) = match fault {
        EnvelopeFault::VersionMismatch(m) => ("soapenv:VersionMismatch", m.as_str()),
        EnvelopeFault::MustUnderstand(m) => ("soapenv:MustUnderstand", m.as_str()),
        EnvelopeFault::Client(m) => ("soapenv:Client", m.as_str()),
        EnvelopeFault::Vasa(f) if f.kind == "InvalidArgument" => {
            ("soapenv:Client", f.message.as_str())
        }
        EnvelopeFault::Vasa(f) => ("soapenv:Server", f.message.as_str()),
    };
    w.leaf("faultcode", &[], code);
    w.leaf("faultstring", &[], message);
    if let EnvelopeFault::Vasa(f) = fault {
        w.start("detail", &[]);
        let outer = format!("vasa:{}", f.kind);
        w.start(&outer, &[]);
        let inner = schema::Field::opt(f.kind, schema::Ty::Complex(f.kind));
        if let Err(e) =
            codec::encode_element(&mut w, Ns::Vasa, &inner, &Value::Struct(f.to_struct()))
        {
            tracing::error!("a fault that does not fit the schema: {e}");
        }
        w.end(&outer);
        w.end("detail");
    }
    w.end("soapenv:Fault");
    envelope_end(w)
}
