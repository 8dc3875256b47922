//! The VASA 2.0 message set this provider implements, as data: every type
//! with its namespace, base and elements in order, and every operation with
//! its parameters, result and faults. One table serves three readers: the
//! WSDL the provider publishes is rendered from it ([`crate::wsdl`]), requests
//! are decoded against it and answers encoded in its order ([`crate::codec`]).
//! So what is published and what is spoken cannot drift apart.
//!
//! The names, namespaces, orders and occurrences follow the public VASA 2.0
//! schema (`http://com.vmware.vim.vasa/2.0/xsd` and the data namespaces
//! beside it); only the operations the provider implements are declared.

mod operations;
mod types;

#[cfg(test)]
mod tests;

pub use operations::{operation, Operation, OPERATIONS};
pub use types::{type_def, TypeDef, TYPES};

/// The namespaces of the messages, their data and their faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ns {
    /// Request and response wrappers, their children and the fault elements.
    Vasa,
    Data,
    Vvol,
    Fault,
    Profile,
    Capability,
    CapabilityProvider,
    CapabilityTypes,
    Compliance,
    Policy,
}

impl Ns {
    pub const ALL: [Ns; 10] = [
        Ns::Vasa,
        Ns::Data,
        Ns::Vvol,
        Ns::Fault,
        Ns::Profile,
        Ns::Capability,
        Ns::CapabilityProvider,
        Ns::CapabilityTypes,
        Ns::Compliance,
        Ns::Policy,
    ];

    pub fn uri(self) -> &'static str {
        match self {
            Ns::Vasa => "http://com.vmware.vim.vasa/2.0/xsd",
            Ns::Data => "http://data.vasa.vim.vmware.com/xsd",
            Ns::Vvol => "http://vvol.data.vasa.vim.vmware.com/xsd",
            Ns::Fault => "http://fault.vasa.vim.vmware.com/xsd",
            Ns::Profile => "http://profile.policy.data.vasa.vim.vmware.com/xsd",
            Ns::Capability => "http://capability.policy.data.vasa.vim.vmware.com/xsd",
            Ns::CapabilityProvider => {
                "http://provider.capability.policy.data.vasa.vim.vmware.com/xsd"
            }
            Ns::CapabilityTypes => "http://types.capability.policy.data.vasa.vim.vmware.com/xsd",
            Ns::Compliance => "http://compliance.policy.data.vasa.vim.vmware.com/xsd",
            Ns::Policy => "http://policy.data.vasa.vim.vmware.com/xsd",
        }
    }

    /// The prefix this provider writes (any prefix is accepted on input).
    pub fn prefix(self) -> &'static str {
        match self {
            Ns::Vasa => "vasa",
            Ns::Data => "data",
            Ns::Vvol => "vvol",
            Ns::Fault => "fault",
            Ns::Profile => "profile",
            Ns::Capability => "cap",
            Ns::CapabilityProvider => "capprov",
            Ns::CapabilityTypes => "captypes",
            Ns::Compliance => "compliance",
            Ns::Policy => "policy",
        }
    }

    pub fn from_uri(uri: &[u8]) -> Option<Ns> {
        Ns::ALL.into_iter().find(|ns| ns.uri().as_bytes() == uri)
    }
}

/// The target namespace of the WSDL (its messages, port type, binding).
pub const WSDL_NS: &str = "http://com.vmware.vim.vasa/2.0/";
/// XML Schema and XML Schema instance.
pub const XSD_NS: &str = "http://www.w3.org/2001/XMLSchema";
pub const XSI_NS: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// An element's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Str,
    Long,
    Int,
    Bool,
    DateTime,
    Base64,
    /// `xs:anyType`: the value names its own type with `xsi:type`.
    Any,
    /// A complex type of [`TYPES`], by name.
    Complex(&'static str),
}

impl Ty {
    /// The XML Schema built-in's local name, for a simple type.
    pub fn xsd_name(self) -> Option<&'static str> {
        Some(match self {
            Ty::Str => "string",
            Ty::Long => "long",
            Ty::Int => "int",
            Ty::Bool => "boolean",
            Ty::DateTime => "dateTime",
            Ty::Base64 => "base64Binary",
            Ty::Any => "anyType",
            Ty::Complex(_) => return None,
        })
    }

    pub fn from_xsd_name(name: &str) -> Option<Ty> {
        [
            Ty::Str,
            Ty::Long,
            Ty::Int,
            Ty::Bool,
            Ty::DateTime,
            Ty::Base64,
            Ty::Any,
        ]
        .into_iter()
        .find(|t| t.xsd_name() == Some(name))
    }
}

/// One element of a sequence: its name, type and how often it occurs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub ty: Ty,
    /// 0 or 1.
    pub min_occurs: u8,
    /// Unbounded when true, at most one when false.
    pub many: bool,
}

impl Field {
    /// Exactly one.
    pub const fn one(name: &'static str, ty: Ty) -> Field {
        Field {
            name,
            ty,
            min_occurs: 1,
            many: false,
        }
    }
    /// At most one.
    pub const fn opt(name: &'static str, ty: Ty) -> Field {
        Field {
            name,
            ty,
            min_occurs: 0,
            many: false,
        }
    }
    /// Any number.
    pub const fn any(name: &'static str, ty: Ty) -> Field {
        Field {
            name,
            ty,
            min_occurs: 0,
            many: true,
        }
    }
    /// At least one.
    pub const fn some(name: &'static str, ty: Ty) -> Field {
        Field {
            name,
            ty,
            min_occurs: 1,
            many: true,
        }
    }
}
