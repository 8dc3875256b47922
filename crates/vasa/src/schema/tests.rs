use super::*;

fn referenced(ty: Ty) -> Option<&'static str> {
    match ty {
        Ty::Complex(name) => Some(name),
        _ => None,
    }
}

#[test]
fn every_type_and_base_referenced_is_in_the_table_once() {
    for (i, def) in TYPES.iter().enumerate() {
        assert!(
            TYPES[..i].iter().all(|other| other.name != def.name),
            "{} is in the table twice",
            def.name
        );
        if let Some(base) = def.base {
            assert!(
                type_def(base).is_some(),
                "{}: base {base} missing",
                def.name
            );
        }
        for field in def.fields {
            if let Some(name) = referenced(field.ty) {
                assert!(
                    type_def(name).is_some(),
                    "{}.{}: {name} missing",
                    def.name,
                    field.name
                );
            }
        }
        let names: Vec<_> = def.all_fields().iter().map(|(_, f)| f.name).collect();
        for (j, name) in names.iter().enumerate() {
            assert!(!names[..j].contains(name), "{}: {name} twice", def.name);
        }
    }
}

#[test]
fn every_operation_is_named_once_and_declares_its_faults() {
    for (i, op) in OPERATIONS.iter().enumerate() {
        assert!(
            OPERATIONS[..i].iter().all(|o| o.name != op.name),
            "{} twice",
            op.name
        );
        for field in op.input.iter().chain(op.output.iter()) {
            if let Some(name) = referenced(field.ty) {
                assert!(type_def(name).is_some(), "{}: {name} missing", op.name);
            }
        }
        assert!(
            op.faults.contains(&"StorageFault"),
            "{} lacks StorageFault",
            op.name
        );
        assert!(
            op.faults.contains(&"InvalidSession"),
            "{} lacks InvalidSession",
            op.name
        );
        for fault in op.faults {
            let def =
                type_def(fault).unwrap_or_else(|| panic!("{}: fault {fault} missing", op.name));
            assert!(
                def.derives_from("Exception") && def.ns == Ns::Fault,
                "{fault} is not a fault"
            );
        }
        if let Some(output) = &op.output {
            assert_eq!(output.name, "return");
        }
    }
}

#[test]
fn inherited_elements_come_first_in_the_base_namespace() {
    let pe = type_def("ProtocolEndpoint").unwrap();
    let fields = pe.all_fields();
    assert_eq!(
        (fields[0].0, fields[0].1.name),
        (Ns::Data, "uniqueIdentifier")
    );
    assert_eq!((fields[1].0, fields[1].1.name), (Ns::Vvol, "authType"));
    let not_found = type_def("NotFound").unwrap().all_fields();
    assert_eq!(
        (not_found[0].0, not_found[0].1.name),
        (Ns::Vasa, "Exception")
    );
    assert!(type_def("DefaultProfile")
        .unwrap()
        .derives_from("StorageProfile"));
    assert!(!type_def("StorageProfile")
        .unwrap()
        .derives_from("DefaultProfile"));
}

#[test]
fn namespaces_round_trip_through_their_uris() {
    for ns in Ns::ALL {
        assert_eq!(Ns::from_uri(ns.uri().as_bytes()), Some(ns));
    }
    assert_eq!(Ns::from_uri(b"urn:other"), None);
}
