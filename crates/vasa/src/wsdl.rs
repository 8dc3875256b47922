//! The documents a provider publishes: the WSDL (rendered from
//! [`crate::schema`], so it declares exactly what is implemented) and the
//! version document vCenter reads when the provider is registered by its URL.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::schema::{Field, Ns, Ty, TypeDef, OPERATIONS, TYPES, WSDL_NS, XSD_NS};

const WSDL: &str = "http://schemas.xmlsoap.org/wsdl/";
const WSDL_SOAP: &str = "http://schemas.xmlsoap.org/wsdl/soap/";
const SOAP_HTTP: &str = "http://schemas.xmlsoap.org/soap/http";

/// The VASA API version this provider implements.
pub const VASA_API_VERSION: &str = "2.0";

/// The service's path under the provider's address.
pub const SERVICE_PATH: &str = "/vasa/services/vasaService";
/// Where the WSDL is served (also `SERVICE_PATH?wsdl`).
pub const WSDL_PATH: &str = "/vasa/vasaService.wsdl";
/// The version document registration starts from.
pub const VERSION_PATH: &str = "/vasa/version.xml";

fn type_ref(ty: Ty) -> String {
    match ty {
        Ty::Complex(name) => {
            let def = crate::schema::type_def(name).expect("referenced types are in the table");
            format!("{}:{}", def.ns.prefix(), def.name)
        }
        simple => format!("xsd:{}", simple.xsd_name().expect("a simple type")),
    }
}

fn element_decl(out: &mut String, field: &Field) {
    let max = if field.many { "unbounded" } else { "1" };
    let nillable = if field.min_occurs == 0 && !field.many {
        " nillable=\"true\""
    } else {
        ""
    };
    let _ = write!(
        out,
        "<xsd:element name=\"{}\" type=\"{}\" minOccurs=\"{}\" maxOccurs=\"{max}\"{nillable}/>",
        field.name,
        type_ref(field.ty),
        field.min_occurs
    );
}

fn sequence(out: &mut String, fields: &[Field]) {
    out.push_str("<xsd:sequence>");
    for f in fields {
        element_decl(out, f);
    }
    out.push_str("</xsd:sequence>");
}

fn complex_type(out: &mut String, def: &TypeDef) {
    let _ = write!(out, "<xsd:complexType name=\"{}\">", def.name);
    match def.base {
        Some(base) => {
            let _ = write!(
                out,
                "<xsd:complexContent><xsd:extension base=\"{}\">",
                type_ref(Ty::Complex(base))
            );
            sequence(out, def.fields);
            out.push_str("</xsd:extension></xsd:complexContent>");
        }
        None => sequence(out, def.fields),
    }
    out.push_str("</xsd:complexType>");
}

fn ns_of(ty: Ty) -> Option<Ns> {
    match ty {
        Ty::Complex(name) => crate::schema::type_def(name).map(|d| d.ns),
        _ => None,
    }
}

/// The namespaces the schema of `ns` refers to.
fn imports(ns: Ns) -> BTreeSet<Ns> {
    let mut out = BTreeSet::new();
    for def in TYPES.iter().filter(|d| d.ns == ns) {
        out.extend(def.base.and_then(|b| ns_of(Ty::Complex(b))));
        out.extend(def.fields.iter().filter_map(|f| ns_of(f.ty)));
    }
    if ns == Ns::Vasa {
        for op in OPERATIONS {
            out.extend(
                op.input
                    .iter()
                    .chain(op.output.iter())
                    .filter_map(|f| ns_of(f.ty)),
            );
        }
        out.insert(Ns::Fault);
    }
    out.remove(&ns);
    out
}

fn fault_names() -> BTreeSet<&'static str> {
    OPERATIONS
        .iter()
        .flat_map(|o| o.faults.iter().copied())
        .collect()
}

fn schema(out: &mut String, ns: Ns) {
    let _ = write!(
        out,
        "<xsd:schema targetNamespace=\"{}\" elementFormDefault=\"qualified\" attributeFormDefault=\"qualified\">",
        ns.uri()
    );
    for other in imports(ns) {
        let _ = write!(out, "<xsd:import namespace=\"{}\"/>", other.uri());
    }
    for def in TYPES.iter().filter(|d| d.ns == ns) {
        complex_type(out, def);
    }
    if ns == Ns::Vasa {
        for op in OPERATIONS {
            if !op.input.is_empty() {
                let _ = write!(out, "<xsd:element name=\"{}\"><xsd:complexType>", op.name);
                sequence(out, op.input);
                out.push_str("</xsd:complexType></xsd:element>");
            }
            if let Some(ret) = &op.output {
                let _ = write!(
                    out,
                    "<xsd:element name=\"{}Response\"><xsd:complexType>",
                    op.name
                );
                sequence(out, std::slice::from_ref(ret));
                out.push_str("</xsd:complexType></xsd:element>");
            }
        }
        for fault in fault_names() {
            let _ = write!(
                out,
                "<xsd:element name=\"{fault}\"><xsd:complexType><xsd:sequence><xsd:element name=\"{fault}\" type=\"fault:{fault}\" minOccurs=\"0\" nillable=\"true\"/></xsd:sequence></xsd:complexType></xsd:element>"
            );
        }
    }
    out.push_str("</xsd:schema>");
}

/// The WSDL, with the service at `service_url`.
pub fn render_wsdl(service_url: &str) -> String {
    let mut out = String::with_capacity(96 * 1024);
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<wsdl:definitions xmlns:wsdl=\"{WSDL}\" xmlns:soap=\"{WSDL_SOAP}\" xmlns:xsd=\"{XSD_NS}\" xmlns:tns=\"{WSDL_NS}\""
    );
    for ns in Ns::ALL {
        let _ = write!(out, " xmlns:{}=\"{}\"", ns.prefix(), ns.uri());
    }
    let _ = write!(out, " targetNamespace=\"{WSDL_NS}\">");
    out.push_str("<wsdl:documentation>Lacuna VASA 2.0 provider: the operations it implements.</wsdl:documentation>");
    out.push_str("<wsdl:types>");
    for ns in Ns::ALL {
        schema(&mut out, ns);
    }
    out.push_str("</wsdl:types>");
    for op in OPERATIONS {
        let _ = write!(out, "<wsdl:message name=\"{}Request\">", op.name);
        if !op.input.is_empty() {
            let _ = write!(
                out,
                "<wsdl:part name=\"parameters\" element=\"vasa:{}\"/>",
                op.name
            );
        }
        out.push_str("</wsdl:message>");
        let _ = write!(out, "<wsdl:message name=\"{}Response\">", op.name);
        if op.output.is_some() {
            let _ = write!(
                out,
                "<wsdl:part name=\"parameters\" element=\"vasa:{}Response\"/>",
                op.name
            );
        }
        out.push_str("</wsdl:message>");
    }
    for fault in fault_names() {
        let _ = write!(
            out,
            "<wsdl:message name=\"{fault}\"><wsdl:part name=\"parameters\" element=\"vasa:{fault}\"/></wsdl:message>"
        );
    }
    out.push_str("<wsdl:portType name=\"vasaServicePortType\">");
    for op in OPERATIONS {
        let _ = write!(
            out,
            "<wsdl:operation name=\"{0}\"><wsdl:input message=\"tns:{0}Request\"/><wsdl:output message=\"tns:{0}Response\"/>",
            op.name
        );
        for fault in op.faults {
            let _ = write!(
                out,
                "<wsdl:fault name=\"{fault}\" message=\"tns:{fault}\"/>"
            );
        }
        out.push_str("</wsdl:operation>");
    }
    out.push_str("</wsdl:portType>");
    let _ = write!(
        out,
        "<wsdl:binding name=\"vasaServiceSoap11Binding\" type=\"tns:vasaServicePortType\"><soap:binding transport=\"{SOAP_HTTP}\" style=\"document\"/>"
    );
    for op in OPERATIONS {
        let _ = write!(
            out,
            "<wsdl:operation name=\"{0}\"><soap:operation soapAction=\"urn:{0}\" style=\"document\"/><wsdl:input><soap:body use=\"literal\"/></wsdl:input><wsdl:output><soap:body use=\"literal\"/></wsdl:output>",
            op.name
        );
        for fault in op.faults {
            let _ = write!(
                out,
                "<wsdl:fault name=\"{fault}\"><soap:fault use=\"literal\" name=\"{fault}\"/></wsdl:fault>"
            );
        }
        out.push_str("</wsdl:operation>");
    }
    out.push_str("</wsdl:binding>");
    let _ = writeln!(
        out,
        "<wsdl:service name=\"vasaService\"><wsdl:port name=\"vasaServiceHttpSoap11Endpoint\" binding=\"tns:vasaServiceSoap11Binding\"><soap:address location=\"{}\"/></wsdl:port></wsdl:service></wsdl:definitions>",
        xml_attr(service_url)
    );
    out
}

fn xml_attr(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

/// The version document: the VASA versions implemented and where each is served.
pub fn render_version_xml(service_url: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<vasa-provider>\n  <supported-versions>\n    <version id=\"{VASA_API_VERSION}\">\n      <supported-vasa-version>{VASA_API_VERSION}</supported-vasa-version>\n      <location>{}</location>\n    </version>\n  </supported-versions>\n</vasa-provider>\n",
        xml_attr(service_url)
    )
}
