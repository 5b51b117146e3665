//! The provider implementation for a `provider:` value of labs.yaml.

use lab_model::{Fabric, LabSpec, ProviderKind};

use crate::provider::{Provider, ProviderError};
use crate::{aws, multipass, qemu, ssh};

/// The provider for a `provider:` value. Providers that need the lab's own
/// settings (aws: the region) get them from [`for_lab`]; this one falls back
/// to the environment (AWS_REGION, the profile).
pub fn for_kind(kind: ProviderKind) -> Result<Box<dyn Provider>, ProviderError> {
    match kind {
        ProviderKind::Qemu => Ok(Box::new(qemu::QemuProvider::new())),
        ProviderKind::Aws => Ok(Box::new(aws::AwsProvider::new(None, Fabric::Rxe))),
        ProviderKind::Multipass => Ok(Box::new(multipass::MultipassProvider::new())),
        ProviderKind::Ssh => Ok(Box::new(ssh::SshProvider::new(Fabric::Existing))),
    }
}

/// The provider of a lab, with its provider-specific settings.
pub fn for_lab(lab: &LabSpec) -> Result<Box<dyn Provider>, ProviderError> {
    match lab.provider {
        ProviderKind::Aws => Ok(Box::new(aws::AwsProvider::new(lab.aws.clone(), lab.fabric))),
        ProviderKind::Ssh => Ok(Box::new(ssh::SshProvider::new(lab.fabric))),
        other => for_kind(other),
    }
}
