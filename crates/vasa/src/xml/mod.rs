//! XML as SOAP needs it: a bounded parse of a request into a tree with every
//! name resolved to its namespace, and a writer that escapes what it writes.
//! Nothing here knows VASA.

mod reader;
mod writer;

pub use reader::{parse, Element, Limits, QualifiedName, XmlError};
pub use writer::XmlWriter;
