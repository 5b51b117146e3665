//! What can go wrong talking to EC2, sorted into what the user can act on:
//! credentials, region, instance type, quota, or a refused call with EC2's
//! own code and message.

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

/// Errors of the AWS provider. Each says what failed, on which resource, and
/// what to do.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// No credentials could be found or loaded.
    #[error("no usable AWS credentials: {detail}\n  fix: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (see `aws configure`), then check them with `aws sts get-caller-identity`")]
    NoCredentials {
        /// What the credential chain said.
        detail: String,
    },
    /// EC2 rejected the credentials.
    #[error("AWS rejected the credentials during {operation} ({code}: {message})\n  fix: check the access key and its permissions with `aws sts get-caller-identity`; labctl needs ec2:* on instances, security groups, key pairs, placement groups, VPCs and subnets")]
    CredentialsRejected {
        /// The EC2 operation.
        operation: &'static str,
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// The region in labs.yaml is not an EC2 region.
    #[error("aws.region `{region}` is not an EC2 region; EC2 knows: {}\n  fix: correct aws.region in labs.yaml", known.join(", "))]
    UnknownRegion {
        /// The region asked for.
        region: String,
        /// The regions EC2 reported.
        known: Vec<String>,
    },
    /// EC2 could not be reached at all.
    #[error("cannot reach EC2 in region `{region}` during {operation}: {detail}\n  fix: check aws.region in labs.yaml (a misspelt region has no endpoint) and this machine's network")]
    Unreachable {
        /// The region.
        region: String,
        /// The EC2 operation.
        operation: &'static str,
        /// The transport error.
        detail: String,
    },
    /// The availability zone is not in the region.
    #[error("aws.availability_zone `{zone}` is not a zone of region {region}; its zones are: {}\n  fix: pick one of them in labs.yaml, or leave availability_zone out", known.join(", "))]
    UnknownZone {
        /// The zone asked for.
        zone: String,
        /// The region.
        region: String,
        /// The zones EC2 reported.
        known: Vec<String>,
    },
    /// The instance type does not exist in the region.
    #[error("aws.instance_type `{instance_type}` is not offered in region {region} ({detail})\n  fix: check the name (`aws ec2 describe-instance-types --instance-types {instance_type}`) or pick another type")]
    UnknownInstanceType {
        /// The type.
        instance_type: String,
        /// The region.
        region: String,
        /// What EC2 said.
        detail: String,
    },
    /// `fabric: efa` on an instance type without EFA.
    #[error("aws.instance_type `{instance_type}` does not support EFA (DescribeInstanceTypes reports EfaSupported={supported}), but the lab asks for fabric efa\n  fix: pick an EFA type (c5n.18xlarge, c6in.32xlarge, p4d.24xlarge, hpc7g.16xlarge, ...: `aws ec2 describe-instance-types --filters Name=network-info.efa-supported,Values=true`), or set fabric: rxe")]
    NoEfa {
        /// The type.
        instance_type: String,
        /// What EC2 reported (false, or unknown).
        supported: String,
    },
    /// An account limit stopped a call.
    #[error("EC2 refused {operation} for lab `{lab}` because of an account limit ({code}: {message})\n  fix: request a higher quota (Service Quotas console, EC2, e.g. \"Running On-Demand Standard instances\" counted in vCPUs), or use fewer nodes or a smaller aws.instance_type")]
    Quota {
        /// The lab.
        lab: String,
        /// The EC2 operation.
        operation: &'static str,
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// EC2 has no capacity for the type right now.
    #[error("EC2 has no capacity for {operation} in lab `{lab}` right now ({code}: {message})\n  fix: try another aws.availability_zone, another instance type, or later")]
    Capacity {
        /// The lab.
        lab: String,
        /// The EC2 operation.
        operation: &'static str,
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// A lab without an id: its resources could not be told from those of
    /// another lab of the same name.
    #[error("lab `{lab}` has no id in its state, so its AWS resources cannot be told from another lab's of the same name\n  fix: `labctl down` the lab and `labctl up` it again (every new lab gets an id)")]
    NoLabId {
        /// The lab.
        lab: String,
    },
    /// Any other refused call.
    #[error("EC2 {operation} failed for {resource}: {code}: {message}")]
    Api {
        /// The EC2 operation.
        operation: &'static str,
        /// What it was about (lab, node, resource id).
        resource: String,
        /// EC2's error code (or "unknown").
        code: String,
        /// EC2's message, or the SDK's description.
        message: String,
    },
    /// An instance stopped or failed while starting.
    #[error("node `{node}`: EC2 instance {instance} is {state}: {reason}\n  fix: see the instance's console output (`aws ec2 get-console-output --instance-id {instance}`); `labctl down` removes the lab")]
    InstanceFailed {
        /// The node.
        node: String,
        /// The instance id.
        instance: String,
        /// Its state.
        state: String,
        /// EC2's state reason.
        reason: String,
    },
    /// An instance labctl terminated was started or stopped instead.
    #[error("EC2 instance {instance} is {state} instead of terminating (something else started or stopped it)\n  fix: wait until it has stopped, then run `labctl down` again")]
    NotTerminating {
        /// The instance id.
        instance: String,
        /// Its state.
        state: String,
    },
    /// Something did not happen in time.
    #[error("timed out after {waited_s} s waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited_s: u64,
    },
    /// A node has no address labctl can reach.
    #[error("node `{node}`: EC2 instance {instance} has no public IPv4 address\n  fix: launch into a subnet whose route table has an internet gateway (or leave aws.subnet_id out so labctl creates one), or set aws.ssh_address: private when labctl runs inside the VPC")]
    NoPublicAddress {
        /// The node.
        node: String,
        /// The instance id.
        instance: String,
    },
    /// The controller's public address could not be found for the SSH rule.
    #[error("cannot find this controller's public IPv4 address for the SSH rule ({detail})\n  fix: set aws.ssh_cidr in labs.yaml, like 203.0.113.7/32")]
    ControllerAddress {
        /// What failed.
        detail: String,
    },
    /// The lab has no region: no aws block, no state, no AWS_REGION.
    #[error("lab `{lab}`: no AWS region is known (no aws block in labs.yaml, no recorded state, no AWS_REGION)\n  fix: set aws.region in labs.yaml or AWS_REGION")]
    NoRegion {
        /// The lab.
        lab: String,
    },
}

/// One line from the SDK's account of a failed credential chain: its first
/// line and the providers it tried, without the Debug dump of the error
/// structs it appends (the whole text is logged at debug level, `-vv`).
pub fn credentials_detail(sdk_text: &str) -> String {
    tracing::debug!(detail = sdk_text, "AWS credential chain");
    let mut lines = sdk_text.lines();
    let first = lines.next().unwrap_or_default();
    let tried: Vec<&str> = lines
        .filter_map(|l| l.strip_prefix("  ")?.split_once(':').map(|(name, _)| name))
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect();
    // The Debug dump starts at the first " (" followed by a type name.
    let cut = |text: &str| -> String {
        let end = text
            .match_indices(" (")
            .find(|(i, _)| text[i + 2..].starts_with(|c: char| c.is_ascii_uppercase()))
            .map_or(text.len(), |(i, _)| i);
        text[..end].trim_end_matches(" Attempted:").trim().to_string()
    };
    if tried.is_empty() {
        cut(first)
    } else {
        format!("{} (tried: {})", cut(first), tried.join(", "))
    }
}

impl AwsError {
    /// Sorts a failed SDK call by what the user can do about it.
    pub fn from_sdk<E, R>(operation: &'static str, region: &str, lab: &str, resource: &str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        let context = DisplayErrorContext(&err).to_string();
        // A client without credentials fails before sending anything.
        if err.code().is_none()
            && ["credentials", "identity resolver", "CredentialsNotLoaded"]
                .iter()
                .any(|w| context.contains(w))
        {
            return AwsError::NoCredentials {
                detail: credentials_detail(&context),
            };
        }
        if matches!(err, SdkError::DispatchFailure(_) | SdkError::TimeoutError(_)) {
            return AwsError::Unreachable {
                region: region.to_string(),
                operation,
                detail: context,
            };
        }
        let code = err.code().unwrap_or_default().to_string();
        let message = err.message().map(str::to_string).unwrap_or(context);
        match code.as_str() {
            "AuthFailure"
            | "UnauthorizedOperation"
            | "InvalidClientTokenId"
            | "SignatureDoesNotMatch"
            | "OptInRequired"
            | "UnrecognizedClientException" => AwsError::CredentialsRejected {
                operation,
                code,
                message,
            },
            "InstanceLimitExceeded"
            | "VcpuLimitExceeded"
            | "MaxSpotInstanceCountExceeded"
            | "VpcLimitExceeded"
            | "SecurityGroupLimitExceeded"
            | "RulesPerSecurityGroupLimitExceeded"
            | "InternetGatewayLimitExceeded"
            | "SubnetLimitExceeded"
            | "KeyPairLimitExceeded"
            | "PlacementGroupLimitExceeded"
            | "ResourceLimitExceeded" => AwsError::Quota {
                lab: lab.to_string(),
                operation,
                code,
                message,
            },
            "InsufficientInstanceCapacity" | "InsufficientCapacity" | "Unsupported" if operation == "RunInstances" => {
                AwsError::Capacity {
                    lab: lab.to_string(),
                    operation,
                    code,
                    message,
                }
            }
            _ => AwsError::Api {
                operation,
                resource: resource.to_string(),
                code: if code.is_empty() { "unknown".into() } else { code },
                message,
            },
        }
    }

    /// EC2's error code, for calls whose "not found" means "already gone".
    pub fn code(&self) -> Option<&str> {
        match self {
            AwsError::Api { code, .. }
            | AwsError::Quota { code, .. }
            | AwsError::Capacity { code, .. }
            | AwsError::CredentialsRejected { code, .. } => Some(code),
            _ => None,
        }
    }

    /// A resource that is already gone (deleting is then done).
    pub fn is_not_found(&self) -> bool {
        self.code()
            .is_some_and(|c| c.ends_with(".NotFound") || c.ends_with(".Unknown") || c == "InvalidGroup.NotFound")
    }
}

// The provider contract knows no provider's errors: an EC2 failure reaches
// it boxed, as the `aws` provider's service error.
impl From<AwsError> for crate::provider::ProviderError {
    fn from(error: AwsError) -> Self {
        crate::provider::ProviderError::Service {
            provider: "aws",
            error: Box::new(error),
        }
    }
}

#[cfg(test)]
mod credential_tests {
    use super::credentials_detail;

    #[test]
    fn credential_chain_text_becomes_one_line() {
        // What aws-config 1.x prints for an empty chain (Debug dump abridged).
        let sdk = "the credential provider was not enabled: no credentials found in chain. Attempted:\n  Environment: the credential provider was not enabled: environment variable not set\n  Profile: the credential provider was not enabled\n  Ec2InstanceMetadata: the credential provider was not enabled: IMDS disabled (CredentialsNotLoaded(CredentialsNotLoaded { source: Some(ProviderChainError { attempts: [] }) }))";
        assert_eq!(
            credentials_detail(sdk),
            "the credential provider was not enabled: no credentials found in chain. (tried: Environment, Profile, Ec2InstanceMetadata)"
        );
        assert_eq!(
            credentials_detail("failed to load credentials (ProviderError(ProviderError { source: x }))"),
            "failed to load credentials"
        );
    }
}
