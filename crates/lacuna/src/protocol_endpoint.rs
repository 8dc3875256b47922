//! The array's vVol protocol endpoint as hosts know it: one administrative
//! logical unit for the whole array, presented to each host that has been
//! given it (`lacuna host protocol-endpoint`) at the LUN the registry keeps,
//! with the vVols bound to that host beneath it. Here: its identity and the
//! host directory the vVol service binds against.

use std::sync::Arc;

use lacuna_scsi::backend::UnitId;
use lacuna_vvol::{HostDirectory, HostEndpoint, ProtocolEndpoint, VvolFault};

use crate::hosts::{HostError, HostRegistry};

/// The protocol endpoint's unit id: derived from the array's id, so it stays
/// the same across restarts and differs between arrays.
pub fn unit_id(array_id: [u8; 16]) -> UnitId {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"lacuna protocol endpoint");
    hasher.update(&array_id);
    let mut out = [0u8; 16];
    out.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
    // NAA 6 (IEEE Registered Extended), as VPD page 83h reports it.
    out[0] = 0x60 | (out[0] & 0x0f);
    out
}

/// `naa.` and the NAA designator in hex: how VASA names a PE in band.
pub fn in_band_id(unit_id: UnitId) -> String {
    format!("naa.{}", hex::encode(unit_id))
}

/// The host registry as the vVol service sees it.
pub struct VvolHosts {
    pub hosts: Arc<HostRegistry>,
    pub unit_id: UnitId,
}

impl HostDirectory for VvolHosts {
    fn protocol_endpoint(&self, host: &str) -> Result<ProtocolEndpoint, VvolFault> {
        let info = self.hosts.get(host).map_err(|e| match e {
            HostError::NotFound(_) => VvolFault::NotFound(format!("host '{host}'")),
            other => VvolFault::StorageFault(other.to_string()),
        })?;
        let lun = info.protocol_endpoint_lun.ok_or_else(|| {
            VvolFault::InvalidArgument(format!(
                "host '{host}' has no protocol endpoint (lacuna host protocol-endpoint {host})"
            ))
        })?;
        Ok(ProtocolEndpoint {
            in_band_id: in_band_id(self.unit_id),
            lun,
        })
    }

    fn protocol_endpoints(&self) -> Vec<HostEndpoint> {
        self.hosts
            .list()
            .into_iter()
            .filter_map(|host| {
                let lun = host.protocol_endpoint_lun?;
                Some(HostEndpoint {
                    host: host.name,
                    protocol: "SCSI".to_string(),
                    protocol_endpoint: ProtocolEndpoint {
                        in_band_id: in_band_id(self.unit_id),
                        lun,
                    },
                    bound_vvols: 0,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_id_is_naa_6_and_follows_the_array() {
        let a = unit_id([1; 16]);
        assert_eq!(a[0] >> 4, 6);
        assert_eq!(a, unit_id([1; 16]));
        assert_ne!(a, unit_id([2; 16]));
        assert_eq!(in_band_id(a).len(), 4 + 32);
    }
}
