//! Interop with the open-source initiator tools (libiscsi's utilities, qemu's iscsi driver)
//! against the transport and an in-memory SCSI double.

mod common;

use common::*;

#[test]
fn iscsi_inq_reads_standard_inquiry() {
    let server = TestServer::start();
    let (ok, out) = run_tool("iscsi-inq", &["-i", INITIATOR_IQN, &server.url(0)]);
    assert!(ok, "{out}");
    assert!(out.contains("LACUNA"), "{out}");
    assert!(out.contains("TEST DOUBLE"), "{out}");
}
