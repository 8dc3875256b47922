use super::*;
use crate::schema::{operation, Field, Ns};
use crate::xml::{parse, Limits};

const HEAD: &str = r#"xmlns:vasa="http://com.vmware.vim.vasa/2.0/xsd" xmlns:data="http://data.vasa.vim.vmware.com/xsd" xmlns:vvol="http://vvol.data.vasa.vim.vmware.com/xsd" xmlns:profile="http://profile.policy.data.vasa.vim.vmware.com/xsd" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema""#;

fn params(op: &str, inner: &str) -> Result<Struct, DecodeError> {
    let text = format!("<vasa:{op} {HEAD}>{inner}</vasa:{op}>");
    let element = parse(text.as_bytes(), Limits::default()).unwrap();
    let op = operation(op).unwrap();
    let fields: Vec<_> = op.input.iter().map(|f| (Ns::Vasa, f)).collect();
    decode_sequence("parameters", &element, &fields)
}

#[test]
fn a_request_decodes_into_typed_values() {
    let p = params(
        "setContext",
        "<vasa:usageContext><data:hostGuid>h-1</data:hostGuid>\
         <data:hostInitiator><data:uniqueIdentifier>i</data:uniqueIdentifier><data:iscsiIdentifier>iqn.a</data:iscsiIdentifier></data:hostInitiator>\
         <data:hostInitiator><data:iscsiIdentifier>iqn.b</data:iscsiIdentifier></data:hostInitiator>\
         <data:sessionTimeoutInSeconds> 600 </data:sessionTimeoutInSeconds></vasa:usageContext>",
    )
    .unwrap();
    let usage = p.child("usageContext").unwrap();
    assert_eq!(usage.ty, "UsageContext");
    assert_eq!(usage.opt_str("hostGuid"), Some("h-1"));
    let initiators: Vec<_> = usage
        .children("hostInitiator")
        .iter()
        .map(|i| i.str("iscsiIdentifier").unwrap().to_string())
        .collect();
    assert_eq!(initiators, ["iqn.a", "iqn.b"]);
    assert_eq!(usage.opt_long("sessionTimeoutInSeconds"), Some(600));
}

#[test]
fn requests_off_the_schema_are_refused_with_the_element_named() {
    let cases = [
        // out of order: sizeInMB before vvolType
        (
            "createVirtualVolume",
            "<vasa:containerId>c</vasa:containerId><vasa:sizeInMB>1</vasa:sizeInMB><vasa:vvolType>Data</vasa:vvolType>",
            "vvolType is required before",
        ),
        ("getTaskUpdate", "", "taskId is required"),
        (
            "getTaskUpdate",
            "<vasa:taskId>1</vasa:taskId><vasa:taskId>2</vasa:taskId>",
            "taskId given twice",
        ),
        ("getTaskUpdate", "<data:taskId>1</data:taskId>", "required before {http://data.vasa"),
        ("getTaskUpdate", "<vasa:taskId>1</vasa:taskId><vasa:extra/>", "unexpected element {http://com.vmware.vim.vasa/2.0/xsd}extra"),
        ("getEvents", "<vasa:lastEventId>ten</vasa:lastEventId>", "is not a long"),
        (
            "registerCASignedProviderCertificate",
            "<vasa:providerCert>x</vasa:providerCert><vasa:forceApply>maybe</vasa:forceApply>",
            "is not a boolean",
        ),
        (
            "createVirtualVolume",
            "<vasa:containerId>c</vasa:containerId><vasa:vvolType>Data</vasa:vvolType><vasa:storageProfile xsi:type=\"data:NameValuePair\"/>",
            "is not a StorageProfile",
        ),
        (
            "createVirtualVolume",
            "<vasa:containerId>c</vasa:containerId><vasa:vvolType>Data</vasa:vvolType><vasa:storageProfile xsi:type=\"data:Nothing\"/>",
            "unknown xsi:type",
        ),
    ];
    for (op, inner, expect) in cases {
        let error = params(op, inner).unwrap_err();
        assert!(error.0.contains(expect), "{op} {inner}: {error}");
    }
}

#[test]
fn a_derived_type_and_typed_any_values_are_accepted() {
    let p = params(
        "updateStorageProfileForVirtualVolume",
        "<vasa:vvolId>v</vasa:vvolId><vasa:newStorageProfile xsi:type=\"profile:DefaultProfile\">\
         <profile:createdBy>me</profile:createdBy><profile:creationTime>2026-12-01T10:00:00.5+01:00</profile:creationTime>\
         <profile:generationId>3</profile:generationId><profile:name>n</profile:name><profile:profileId>p</profile:profileId>\
         <profile:entityType>Data</profile:entityType></vasa:newStorageProfile>",
    )
    .unwrap();
    let profile = p.child("newStorageProfile").unwrap();
    assert_eq!(profile.ty, "DefaultProfile");
    assert_eq!(
        profile.get("creationTime"),
        Some(&Value::DateTime(1_796_115_600))
    );
    assert_eq!(profile.strs("entityType"), ["Data"]);

    let any = parse(
        format!("<x {HEAD}><vasa:Exception xsi:type=\"xsd:boolean\">true</vasa:Exception></x>")
            .as_bytes(),
        Limits::default(),
    )
    .unwrap();
    static FIELD: Field = Field::opt("Exception", crate::schema::Ty::Any);
    let s = decode_sequence("Exception", &any, &[(Ns::Vasa, &FIELD)]).unwrap();
    assert_eq!(s.get("Exception"), Some(&Value::Bool(true)));
}

fn encode(ty: &'static str, s: &Struct) -> Result<String, EncodeError> {
    let mut w = XmlWriter::new();
    let field = Field::one("value", crate::schema::Ty::Complex(ty));
    encode_element(&mut w, Ns::Vasa, &field, &Value::Struct(s.clone()))?;
    Ok(w.finish())
}

#[test]
fn answers_are_written_in_schema_order_with_their_namespaces() {
    // Built out of order; written base first, then in sequence order.
    let handle = Struct::new("VirtualVolumeHandle")
        .with("vvolSecondaryId", "0xe200000000a6")
        .with(
            "peInBandId",
            Struct::new("ProtocolEndpointInbandId")
                .with("protocolEndpointType", "SCSI")
                .with("lunId", "naa.1"),
        )
        .with("uniqueIdentifier", "rfc4122.x");
    let text = encode("VirtualVolumeHandle", &handle).unwrap();
    assert_eq!(
        text,
        "<vasa:value><data:uniqueIdentifier>rfc4122.x</data:uniqueIdentifier><vvol:peInBandId>\
         <vvol:lunId>naa.1</vvol:lunId><vvol:protocolEndpointType>SCSI</vvol:protocolEndpointType>\
         </vvol:peInBandId><vvol:vvolSecondaryId>0xe200000000a6</vvol:vvolSecondaryId></vasa:value>"
    );
}

#[test]
fn answers_off_the_schema_are_refused() {
    let unknown = Struct::new("NameValuePair").with("color", "red");
    assert!(encode("NameValuePair", &unknown)
        .unwrap_err()
        .0
        .contains("no element color"));
    let missing = Struct::new("QueryConstraint").with("value", "v");
    assert!(encode("QueryConstraint", &missing)
        .unwrap_err()
        .0
        .contains("key is required"));
    let twice = Struct::new("QueryConstraint")
        .with("key", "a")
        .with("key", "b");
    assert!(encode("QueryConstraint", &twice)
        .unwrap_err()
        .0
        .contains("more than once"));
    let wrong = Struct::new("QueryConstraint").with("key", 5i64);
    assert!(encode("QueryConstraint", &wrong).is_err());
    let not_derived = Struct::new("NameValuePair");
    assert!(encode("StorageProfile", &not_derived)
        .unwrap_err()
        .0
        .contains("is not a StorageProfile"));
}

#[test]
fn any_values_carry_their_type() {
    let status = Struct::new("BatchErrorResult").with("error", Struct::new("NotFound"));
    let text = encode("BatchErrorResult", &status).unwrap();
    assert!(
        text.contains("<vvol:error xsi:type=\"fault:NotFound\">"),
        "{text}"
    );
    let task = Struct::new("KeyAnyValue")
        .with("key", "k")
        .with("value", 7i64);
    let text = encode("KeyAnyValue", &task).unwrap();
    assert!(
        text.contains("<policy:value xsi:type=\"xsd:long\">7</policy:value>"),
        "{text}"
    );
}

#[test]
fn date_times_parse_and_format_in_utc() {
    assert_eq!(format_date_time(0), "1970-01-01T00:00:00Z");
    assert_eq!(format_date_time(951_825_600), "2000-02-29T12:00:00Z");
    assert_eq!(parse_date_time("2000-02-29T12:00:00Z"), Some(951_825_600));
    assert_eq!(
        parse_date_time("2000-02-29T13:30:00+01:30"),
        Some(951_825_600)
    );
    assert_eq!(
        parse_date_time("2000-02-29T12:00:00.123"),
        Some(951_825_600)
    );
    for bad in [
        "2000-02-29",
        "2000-13-01T00:00:00Z",
        "2000-01-01T00:00:00X",
        "2000-01-01T00:00:00.Z",
    ] {
        assert_eq!(parse_date_time(bad), None, "{bad}");
    }
    for t in [-86_400i64, 0, 1_796_115_600, 4_102_444_800] {
        assert_eq!(parse_date_time(&format_date_time(t)), Some(t));
    }
}

#[test]
fn a_simple_value_holding_elements_or_another_type_is_refused() {
    let cases = [
        // A struct where a string belongs (as a client passing a whole
        // prepareToSnapshot result for the snapshot's id).
        (
            "getTaskUpdate",
            r#"<vasa:taskId xsi:type="vvol:PrepareSnapshotResult"><vvol:snapshotId>x</vvol:snapshotId></vasa:taskId>"#,
            "a simple value holds no element",
        ),
        (
            "getTaskUpdate",
            r#"<vasa:taskId xsi:type="vvol:PrepareSnapshotResult"/>"#,
            "xsi:type PrepareSnapshotResult is not a Str",
        ),
        (
            "getTaskUpdate",
            "<vasa:taskId><vvol:snapshotId>x</vvol:snapshotId></vasa:taskId>",
            "a simple value holds no element",
        ),
        (
            "getEvents",
            r#"<vasa:lastEventId xsi:type="xsd:string">7</vasa:lastEventId>"#,
            "xsi:type string is not a Long",
        ),
    ];
    for (op, inner, expected) in cases {
        let error = params(op, inner).unwrap_err();
        assert!(error.0.contains(expected), "{op} {inner}: {error}");
    }
    let typed = params(
        "getEvents",
        r#"<vasa:lastEventId xsi:type="xsd:long">7</vasa:lastEventId>"#,
    )
    .unwrap();
    assert_eq!(typed.opt_long("lastEventId"), Some(7));
}
