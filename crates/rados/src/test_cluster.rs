//! A one-node test cluster (`scripts/ceph-cluster.sh`) for the tests of this
//! crate and of the stores built on it: started in a temporary directory on
//! a free port, stopped (by its daemons' PIDs) when dropped, also when a test
//! fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::Cluster;

/// The pool the test cluster makes.
pub const POOL: &str = "lacuna";

/// The test cluster, stopped when dropped (also when a check fails).
pub struct TestCluster {
    dir: PathBuf,
    pub conf: PathBuf,
    _tmp: tempfile::TempDir,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ceph-cluster.sh")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl TestCluster {
    pub fn start() -> TestCluster {
        let tmp = tempfile::Builder::new()
            .prefix("lacuna-ceph-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().join("cluster");
        let out = Command::new("bash")
            .arg(script())
            .args(["start", dir.to_str().unwrap(), POOL])
            .env("MON_PORT", free_port().to_string())
            .output()
            .expect("running scripts/ceph-cluster.sh (the test command installs Ceph)");
        assert!(
            out.status.success(),
            "the test cluster did not start: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert!(conf.exists(), "{}", conf.display());
        TestCluster {
            dir,
            conf,
            _tmp: tmp,
        }
    }

    pub fn client(&self) -> Arc<Cluster> {
        Cluster::connect(&self.conf).expect("connecting to the test cluster")
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .args(["stop", self.dir.to_str().unwrap()])
            .status();
    }
}
