//! Certificate registration: vCenter registers its client certificate with
//! the provider's credentials, may replace the provider's certificate with
//! one its CA signed, and registers its CAs and CRLs.

use subtle::ConstantTimeEq;

use super::{Call, OpResult, Outcome, Provider};
use crate::fault::Fault;

impl Provider {
    fn check_login(&self, user: Option<&str>, password: Option<&str>) -> Result<(), Fault> {
        let user_ok = user
            .unwrap_or("")
            .as_bytes()
            .ct_eq(self.config.user_name.as_bytes());
        let password_ok = password
            .unwrap_or("")
            .as_bytes()
            .ct_eq(self.config.password.as_bytes());
        if bool::from(user_ok & password_ok) {
            Ok(())
        } else {
            Err(Fault::new("InvalidLogin", "wrong user name or password"))
        }
    }

    pub(crate) fn register_vasa_certificate(&self, call: &Call) -> OpResult {
        self.check_login(
            call.params.opt_str("userName"),
            call.params.opt_str("password"),
        )?;
        let pem = call
            .params
            .opt_str("newCertificate")
            .ok_or_else(|| Fault::new("InvalidCertificate", "no newCertificate"))?;
        let info = self.certs.register_client(pem)?;
        tracing::info!(subject = info.subject, "VASA client certificate registered");
        Ok(Outcome::one(
            self.provider_info("0", crate::session::DEFAULT_TIMEOUT_S),
        ))
    }

    pub(crate) fn unregister_vasa_certificate(&self, call: &Call) -> OpResult {
        let pem = call
            .params
            .opt_str("existingCertificate")
            .ok_or_else(|| Fault::new("InvalidCertificate", "no existingCertificate"))?;
        self.certs.unregister_client(pem)?;
        Ok(Outcome::none())
    }

    pub(crate) fn request_csr(&self, _call: &Call) -> OpResult {
        Ok(Outcome::one(self.certs.request_csr()?))
    }

    pub(crate) fn register_ca_signed_certificate(&self, call: &Call) -> OpResult {
        let pem = call.params.str("providerCert")?;
        let force = call.params.opt_bool("forceApply").unwrap_or(false);
        let info = self.certs.install_signed(pem, force)?;
        tracing::info!(
            subject = info.subject,
            issuer = info.issuer,
            "VASA provider certificate replaced"
        );
        self.check_certificate_alarm();
        Ok(Outcome::none())
    }

    pub(crate) fn register_ca_certificates(&self, call: &Call) -> OpResult {
        self.check_login(
            call.params.opt_str("providerUserName"),
            call.params.opt_str("providerPassword"),
        )?;
        self.certs
            .set_ca(&call.params.strs("caRootCert"), &call.params.strs("caCRL"))?;
        Ok(Outcome::one(
            self.provider_info("0", crate::session::DEFAULT_TIMEOUT_S),
        ))
    }

    pub(crate) fn refresh_ca_certificates(&self, call: &Call) -> OpResult {
        self.certs
            .set_ca(&call.params.strs("caRootCert"), &call.params.strs("caCRL"))?;
        Ok(Outcome::none())
    }

    /// Raises or clears the certificate-expiry alarm for the current certificate.
    pub fn check_certificate_alarm(&self) {
        self.alarms.check_certificate(
            self.certs.info().not_after_unix_s,
            crate::now_unix_s() as i64,
        );
    }
}
