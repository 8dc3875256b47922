//! VASA SOAP requests: the input is one byte choosing the SOAPAction header
//! (none, or `urn:` and one of the operations without required parameters) then the
//! HTTP body, read with `lacuna_vasa::soap::read_request` as the provider's
//! server does.
//!
//! Checked beyond "no panic": a request that reads writes back (with
//! `write_request`) to a document that reads as the same operation with the
//! same parameters, so what the decoder accepts is exactly what fits the
//! schema; a refusal writes a fault that is well-formed XML the reader takes.
#![no_main]

use lacuna_vasa::schema::OPERATIONS;
use lacuna_vasa::soap;
use libfuzzer_sys::fuzz_target;

fn soap_action(choice: u8) -> Option<String> {
    let without_required: Vec<&str> = OPERATIONS
        .iter()
        .filter(|o| o.input.iter().all(|f| f.min_occurs == 0))
        .map(|o| o.name)
        .collect();
    match choice as usize {
        0 => None,
        n => Some(format!(
            "\"urn:{}\"",
            without_required[(n - 1) % without_required.len()]
        )),
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&choice, body)) = input.split_first() else {
        return;
    };
    let action = soap_action(choice);
    match soap::read_request(body, action.as_deref()) {
        Ok(call) => {
            let written = soap::write_request(&call)
                .unwrap_or_else(|e| panic!("{} read but does not write: {e}", call.operation.name));
            let again = soap::read_request(written.as_bytes(), None)
                .unwrap_or_else(|e| panic!("written back, refused: {e:?}\n{written}"));
            assert_eq!(again.operation.name, call.operation.name);
            assert_eq!(again.params, call.params, "{written}");
        }
        Err(fault) => {
            let written = soap::write_fault(&fault);
            lacuna_vasa::xml::parse(written.as_bytes(), soap::limits())
                .unwrap_or_else(|e| panic!("a fault that does not parse: {e}\n{written}"));
        }
    }
});
