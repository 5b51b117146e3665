//! Request checks done before any RDMA resource is touched, so a bad request
//! fails fast with InvalidArgument naming the field and the allowed range.

use agent_proto::v1::{Fault, WorkloadParams};

/// Largest message size accepted unless the node has less memory to spare.
pub const DEFAULT_MAX_SIZE: u64 = 64 * 1024 * 1024;
/// Largest iteration count accepted.
pub const MAX_ITERATIONS: u64 = 1_000_000_000;
/// Default largest size of an all_sizes sweep.
pub const DEFAULT_SWEEP_MAX: u64 = 8 * 1024 * 1024;
/// A session may register at most this fraction of MemAvailable.
const MEM_AVAILABLE_FRACTION: u64 = 4;
/// The workloads that spread their requests over several QPs (perftest's `-q`).
/// send-bw is not among them: its receives would have to be posted on each
/// QP as it reaches INIT, which the session's connection steps do not do.
pub const MULTI_QP_WORKLOADS: &[&str] = &["write-bw", "read-bw", "atomic-bw", "param-server"];
/// Most QPs one run may ask for.
pub const MAX_QPS: u32 = 16;
/// Longest timed run (`duration_s`), one day.
pub const MAX_DURATION_S: f64 = 86_400.0;
/// Longest session timeout (`timeout_ms`), one week: a session deadline is
/// `now + timeout`, which must not overflow the clock.
pub const MAX_TIMEOUT_MS: u64 = 7 * 86_400 * 1000;

/// The bulk transfers: `total` bytes in `size`-byte chunks.
pub const BULK_WORKLOADS: &[&str] = &["bulk-rdma", "bulk-tcp"];
/// Largest `total` of a bulk transfer (the server holds all of it in memory).
pub const MAX_BULK_TOTAL: u64 = 1 << 30;

/// The bytes a bulk transfer moves: `total`, or `size` x `iterations` when
/// `total` is 0 (saturating: an overflow is refused as out of range).
pub fn bulk_total(params: &WorkloadParams) -> u64 {
    if params.total > 0 {
        params.total
    } else {
        params.size.saturating_mul(params.iterations)
    }
}

/// The faults a workload can inject and then catch in its verdict (`fault`).
/// A lost WRITE or READ is not among them: the server of a one-sided
/// operation sees only its memory, and the next operation overwrites (or
/// reads) the same bytes, so nothing could tell; those runs inject a corrupted
/// byte. An atomic's operand is not data: those runs inject a lost operation.
pub fn injectable_faults(workload: &str) -> &'static [Fault] {
    match workload {
        "write-imm" | "send-recv" | "send-bw" | "send-lat" | "write-lat" | "inference-ring" => {
            &[Fault::Skip, Fault::Corrupt]
        }
        "write-read" | "read" | "write-bw" | "read-bw" | "read-lat" | "mr-cache" | "param-server" | "bulk-rdma"
        | "bulk-tcp" | "fabric-write" | "fabric-lat" => &[Fault::Corrupt],
        "atomic" | "atomic-bw" | "atomic-lat" | "fabric-bw" => &[Fault::Skip],
        _ => &[],
    }
}

fn check_fault(params: &WorkloadParams) -> Result<(), ValidationError> {
    let fault = Fault::try_from(params.fault).map_err(|_| ValidationError::FieldOutOfRange {
        field: "fault",
        value: i128::from(params.fault),
        range: "0 (none), 1 (skip) or 2 (corrupt)",
    })?;
    if fault == Fault::None {
        return Ok(());
    }
    let supported = injectable_faults(&params.workload);
    if !supported.contains(&fault) {
        return Err(ValidationError::FaultNotInjectable {
            workload: params.workload.clone(),
            fault: fault.label(),
            supported: if supported.is_empty() {
                "none".into()
            } else {
                supported.iter().map(|f| f.label()).collect::<Vec<_>>().join(", ")
            },
        });
    }
    // write-lat's one-byte ping is all counter, which every ping rewrites.
    if params.workload == "write-lat" && fault == Fault::Corrupt && !params.all_sizes && params.size < 2 {
        return Err(ValidationError::FieldOutOfRange {
            field: "size",
            value: i128::from(params.size),
            range: ">= 2 for write-lat with fault corrupt (a 1-byte ping is only its counter)",
        });
    }
    Ok(())
}

/// The {addr, rkey} of `params.capability_override`, when set and well formed.
pub fn capability_override(params: &WorkloadParams) -> Option<(u64, u32)> {
    fn number(s: &str) -> Option<u64> {
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        }
    }
    let (addr, rkey) = params.capability_override.trim().split_once(':')?;
    Some((number(addr)?, u32::try_from(number(rkey)?).ok()?))
}

/// Why a request was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ValidationError {
    /// The workload name is not in the registry.
    #[error("unknown workload {name:?}; supported: {supported}")]
    UnknownWorkload {
        /// What the request asked for.
        name: String,
        /// The registry's names, comma separated.
        supported: String,
    },
    /// size outside 1 B .. the limit.
    #[error("size {size} B is out of range: must be 1 B ..= {limit} B ({why})")]
    SizeOutOfRange {
        /// Requested size.
        size: u64,
        /// The effective limit.
        limit: u64,
        /// Where the limit comes from.
        why: String,
    },
    /// iterations above the maximum.
    #[error("iterations {iterations} is out of range: must be 1 ..= {MAX_ITERATIONS} (or 0 with duration_s > 0)")]
    IterationsOutOfRange {
        /// Requested iterations.
        iterations: u64,
    },
    /// A duration that is not a finite number of seconds in range, or none
    /// when the run is timed (iterations 0).
    #[error(
        "duration_s {duration_s} is out of range: must be finite and in [0, 86400] s, and above 0 when iterations is 0"
    )]
    BadDuration {
        /// Requested duration.
        duration_s: f64,
    },
    /// A field with a small integer range was out of it.
    #[error("{field} {value} is out of range: must be {range}")]
    FieldOutOfRange {
        /// The field name as in the proto.
        field: &'static str,
        /// The value given (wide enough for any proto integer).
        value: i128,
        /// Allowed range, human readable.
        range: &'static str,
    },
    /// A required string was empty.
    #[error("{field} must not be empty")]
    Missing {
        /// The field name as in the proto.
        field: &'static str,
    },
    /// A string field that does not parse.
    #[error("{field} {value:?} is malformed: expected {expected}")]
    Malformed {
        /// The field name as in the proto.
        field: &'static str,
        /// The value given.
        value: String,
        /// What it should look like.
        expected: &'static str,
    },
    /// A fault the workload cannot inject (and so could not show caught).
    #[error("{workload} cannot inject fault {fault}; it can inject: {supported}")]
    FaultNotInjectable {
        /// The workload.
        workload: String,
        /// The fault asked for.
        fault: &'static str,
        /// What it can inject.
        supported: String,
    },
    /// A bulk transfer's total outside 1 B .. the limit.
    #[error("total {total} B is out of range: must be 1 B ..= {limit} B ({why}); total 0 means size x iterations")]
    TotalOutOfRange {
        /// The bytes asked for (size x iterations when total was 0).
        total: u64,
        /// The effective limit.
        limit: u64,
        /// Where the limit comes from.
        why: String,
    },
}

/// Limits that depend on the node (so tests can pin them).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest message size.
    pub max_size: u64,
    /// MemAvailable in bytes, if known.
    pub mem_available: Option<u64>,
}

impl Limits {
    /// The node's limits: the default size limit and /proc/meminfo's MemAvailable.
    pub fn of_this_node() -> Limits {
        Limits {
            max_size: DEFAULT_MAX_SIZE,
            mem_available: mem_available_bytes(),
        }
    }

    /// The effective size limit and where it comes from.
    fn size_limit(&self) -> (u64, String) {
        match self.mem_available {
            Some(avail) if avail / MEM_AVAILABLE_FRACTION < self.max_size => (
                avail / MEM_AVAILABLE_FRACTION,
                format!("1/{MEM_AVAILABLE_FRACTION} of MemAvailable {avail} B"),
            ),
            _ => (self.max_size, "agent limit".to_string()),
        }
    }
}

impl Limits {
    /// A bulk transfer's total against [`MAX_BULK_TOTAL`] and 1/4 of MemAvailable.
    fn check_bulk_total(&self, total: u64) -> Result<(), ValidationError> {
        let (limit, why) = match self.mem_available {
            Some(avail) if avail / MEM_AVAILABLE_FRACTION < MAX_BULK_TOTAL => (
                avail / MEM_AVAILABLE_FRACTION,
                format!("1/{MEM_AVAILABLE_FRACTION} of MemAvailable {avail} B: the server holds all of it"),
            ),
            _ => (MAX_BULK_TOTAL, "agent limit for bulk transfers, 1 GiB".to_string()),
        };
        if total == 0 || total > limit {
            return Err(ValidationError::TotalOutOfRange { total, limit, why });
        }
        Ok(())
    }
}

/// MemAvailable from /proc/meminfo, in bytes.
pub fn mem_available_bytes() -> Option<u64> {
    meminfo_field("MemAvailable:")
}

/// A `/proc/meminfo` field in bytes.
pub fn meminfo_field(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Checks `params` for a run of a workload in `supported`.
pub fn validate(params: &WorkloadParams, supported: &[&str], limits: &Limits) -> Result<(), ValidationError> {
    if params.workload.is_empty() {
        return Err(ValidationError::Missing { field: "workload" });
    }
    if !supported.contains(&params.workload.as_str()) {
        return Err(ValidationError::UnknownWorkload {
            name: params.workload.clone(),
            supported: supported.join(", "),
        });
    }
    let (limit, why) = limits.size_limit();
    let sizes_to_check = if params.all_sizes {
        // A sweep runs 2 B, 4 B, ... up to max_size: below 2 it would run nothing.
        if effective_max_size(params) < 2 {
            return Err(ValidationError::FieldOutOfRange {
                field: "max_size",
                value: i128::from(params.max_size),
                range: "0 (default) or 2 ..= the size limit (a sweep starts at 2 B)",
            });
        }
        [effective_max_size(params)].to_vec()
    } else {
        vec![params.size]
    };
    for size in sizes_to_check {
        if size == 0 || size > limit {
            return Err(ValidationError::SizeOutOfRange { size, limit, why });
        }
    }
    if params.iterations > MAX_ITERATIONS {
        return Err(ValidationError::IterationsOutOfRange {
            iterations: params.iterations,
        });
    }
    // Checked whether or not the run is timed: the workloads turn it into a
    // Duration (which panics on NaN, infinity or 1e20) wherever it is > 0.
    let duration_ok = params.duration_s.is_finite() && (0.0..=MAX_DURATION_S).contains(&params.duration_s);
    if !duration_ok || (params.iterations == 0 && params.duration_s == 0.0) {
        return Err(ValidationError::BadDuration {
            duration_s: params.duration_s,
        });
    }
    if params.timeout_ms > MAX_TIMEOUT_MS {
        return Err(ValidationError::FieldOutOfRange {
            field: "timeout_ms",
            value: i128::from(params.timeout_ms),
            range: "0 (default 30 s) ..= 604800000 (one week)",
        });
    }
    check_range("tx_depth", params.tx_depth as i64, 0, 4096, "0 (default) ..= 4096")?;
    check_range(
        "cq_moderation",
        params.cq_moderation as i64,
        0,
        4096,
        "0 (default) ..= 4096",
    )?;
    check_range("post_list", params.post_list as i64, 0, 1024, "0 (default) ..= 1024")?;
    check_range("inline_size", params.inline_size as i64, 0, 1024, "0 ..= 1024")?;
    // Several QPs only where the run spreads over them; elsewhere refuse
    // rather than run one and report it as many.
    if MULTI_QP_WORKLOADS.contains(&params.workload.as_str()) {
        check_range(
            "num_qps",
            params.num_qps as i64,
            0,
            MAX_QPS as i64,
            "0 (default 1) ..= 16",
        )?;
    } else {
        check_range(
            "num_qps",
            params.num_qps as i64,
            0,
            1,
            "0 or 1 (several QPs are for write-bw, read-bw, atomic-bw and param-server)",
        )?;
    }
    check_range("ib_port", params.ib_port as i64, 0, 255, "0 (default 1) ..= 255")?;
    if !params.capability_override.is_empty() && capability_override(params).is_none() {
        return Err(ValidationError::Malformed {
            field: "capability_override",
            value: params.capability_override.clone(),
            expected: "ADDR:RKEY, each hex with 0x or decimal (e.g. 0x7f3a2c000000:0x1a2b)",
        });
    }
    check_range("gid_index", params.gid_index as i64, -1, 255, "-1 (auto) ..= 255")?;
    if BULK_WORKLOADS.contains(&params.workload.as_str()) {
        limits.check_bulk_total(bulk_total(params))?;
    }
    check_range(
        "batches",
        params.batches as i64,
        0,
        1_000_000,
        "0 (default) ..= 1000000",
    )?;
    check_pattern_workloads(params, limits)?;
    check_fault(params)?;
    if params.cq_moderation > 0 && params.tx_depth > 0 && params.cq_moderation > params.tx_depth {
        return Err(ValidationError::FieldOutOfRange {
            field: "cq_moderation",
            value: i128::from(params.cq_moderation),
            range: "<= tx_depth",
        });
    }
    Ok(())
}

/// mr-cache, param-server, inference-ring and write-imm register a multiple of `size`.
fn check_pattern_workloads(params: &WorkloadParams, limits: &Limits) -> Result<(), ValidationError> {
    let (limit, why) = limits.size_limit();
    let (factor, what) = match params.workload.as_str() {
        "mr-cache" => (
            crate::workload::mr_cache::SERVER_BUFFER_FACTOR,
            "mr-cache's server holds a slot per size: 15 x size".to_string(),
        ),
        "param-server" => {
            if !params.size.is_multiple_of(crate::workload::param_server::VALUE_BYTES) {
                return Err(ValidationError::FieldOutOfRange {
                    field: "size",
                    value: i128::from(params.size),
                    range: "a multiple of 4 for param-server (gradients are u32 values)",
                });
            }
            let workers = u64::from(params.num_qps.max(1));
            (
                workers + 1,
                format!("param-server's server holds {workers} gradient slots and the weights"),
            )
        }
        "inference-ring" => {
            let slots = crate::workload::inference_ring::slots(params) as u64;
            (slots, format!("inference-ring's ring holds {slots} slots (tx_depth)"))
        }
        "write-imm" => {
            let batches = u64::from(crate::workload::write_imm::batch_count(params));
            (batches, format!("write-imm's server holds all {batches} batches"))
        }
        _ => return Ok(()),
    };
    if params.size.saturating_mul(factor) > limit {
        return Err(ValidationError::SizeOutOfRange {
            size: params.size,
            limit: limit / factor,
            why: format!("{what}, within {why}"),
        });
    }
    Ok(())
}

/// The run's `duration_s` as the timed loops use it (zero when unset). Only
/// for validated params: [`validate`] bounds it to [0, 86400] s, outside of
/// which the conversion panics.
pub fn duration(params: &WorkloadParams) -> std::time::Duration {
    std::time::Duration::from_secs_f64(params.duration_s.max(0.0))
}

/// The largest size of a sweep (max_size, or the default when unset).
pub fn effective_max_size(params: &WorkloadParams) -> u64 {
    if params.max_size == 0 {
        DEFAULT_SWEEP_MAX
    } else {
        params.max_size
    }
}

fn check_range(
    field: &'static str,
    value: i64,
    min: i64,
    max: i64,
    range: &'static str,
) -> Result<(), ValidationError> {
    if value < min || value > max {
        return Err(ValidationError::FieldOutOfRange {
            field,
            value: i128::from(value),
            range,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: &[&str] = &["write-read", "read", "write-bw"];

    fn limits() -> Limits {
        Limits {
            max_size: DEFAULT_MAX_SIZE,
            mem_available: Some(1 << 40),
        }
    }

    fn params(size: u64) -> WorkloadParams {
        WorkloadParams {
            workload: "write-read".into(),
            size,
            iterations: 1,
            gid_index: -1,
            ..Default::default()
        }
    }

    #[test]
    fn write_imm_buffer_is_size_times_batches() {
        let mut p = params(1 << 20);
        p.workload = "write-imm".into();
        p.batches = 64;
        assert_eq!(validate(&p, &["write-imm"], &limits()), Ok(()));
        p.batches = 65;
        let err = validate(&p, &["write-imm"], &limits()).unwrap_err();
        assert!(
            matches!(err, ValidationError::SizeOutOfRange { limit, .. } if limit == DEFAULT_MAX_SIZE / 65),
            "{err}"
        );
        assert!(err.to_string().contains("all 65 batches"), "{err}");
    }

    #[test]
    fn faults_are_taken_only_where_the_verdict_can_catch_them() {
        let names = &["write-read", "write-bw", "write-lat", "atomic-bw", "fabric-bw"];
        let with = |workload: &str, fault: Fault, size: u64| {
            let mut p = params(size);
            p.workload = workload.into();
            p.set_fault(fault);
            validate(&p, names, &limits())
        };
        assert_eq!(with("write-read", Fault::Corrupt, 64), Ok(()));
        assert_eq!(with("atomic-bw", Fault::Skip, 8), Ok(()));
        assert_eq!(with("write-lat", Fault::Skip, 1), Ok(()));
        let err = with("write-bw", Fault::Skip, 64).unwrap_err().to_string();
        assert_eq!(err, "write-bw cannot inject fault skip; it can inject: corrupt");
        let err = with("fabric-bw", Fault::Corrupt, 64).unwrap_err().to_string();
        assert!(err.ends_with("it can inject: skip"), "{err}");
        // Every workload can show its verdict failing.
        for name in crate::workload::names() {
            assert!(!injectable_faults(name).is_empty(), "{name} injects no fault");
        }
        // A 1-byte write-lat ping is all counter: nothing to corrupt.
        assert!(matches!(
            with("write-lat", Fault::Corrupt, 1),
            Err(ValidationError::FieldOutOfRange { field: "size", .. })
        ));
        let mut unknown = params(8);
        unknown.fault = 7;
        assert!(matches!(
            validate(&unknown, names, &limits()),
            Err(ValidationError::FieldOutOfRange { field: "fault", .. })
        ));
    }

    #[test]
    fn accepts_the_boundaries() {
        assert_eq!(validate(&params(1), NAMES, &limits()), Ok(()));
        assert_eq!(validate(&params(DEFAULT_MAX_SIZE), NAMES, &limits()), Ok(()));
        let mut p = params(8);
        p.iterations = MAX_ITERATIONS;
        assert_eq!(validate(&p, NAMES, &limits()), Ok(()));
    }

    #[test]
    fn rejects_sizes_outside_the_range() {
        assert!(matches!(
            validate(&params(0), NAMES, &limits()),
            Err(ValidationError::SizeOutOfRange { .. })
        ));
        assert!(matches!(
            validate(&params(DEFAULT_MAX_SIZE + 1), NAMES, &limits()),
            Err(ValidationError::SizeOutOfRange { .. })
        ));
    }

    #[test]
    fn size_limit_shrinks_with_available_memory() {
        let small = Limits {
            max_size: DEFAULT_MAX_SIZE,
            mem_available: Some(16 * 1024 * 1024),
        };
        let err = validate(&params(8 * 1024 * 1024), NAMES, &small).unwrap_err();
        assert!(err.to_string().contains("MemAvailable"), "{err}");
        assert_eq!(validate(&params(4 * 1024 * 1024), NAMES, &small), Ok(()));
    }

    #[test]
    fn sweeps_check_their_max_size() {
        let mut p = params(0);
        p.all_sizes = true;
        assert_eq!(validate(&p, NAMES, &limits()), Ok(()));
        p.max_size = DEFAULT_MAX_SIZE * 2;
        assert!(validate(&p, NAMES, &limits()).is_err());
        // Found while writing the fuzz target: a sweep up to 1 B has no sizes,
        // and the perf workloads' buffer_len panicked on the empty sweep.
        p.max_size = 1;
        assert!(validate(&p, NAMES, &limits())
            .unwrap_err()
            .to_string()
            .contains("max_size 1 is out of range"));
        p.max_size = 2;
        assert_eq!(validate(&p, NAMES, &limits()), Ok(()));
    }

    #[test]
    fn rejects_iterations_and_durations() {
        let mut p = params(8);
        p.iterations = MAX_ITERATIONS + 1;
        assert!(matches!(
            validate(&p, NAMES, &limits()),
            Err(ValidationError::IterationsOutOfRange { .. })
        ));
        p.iterations = 0;
        assert!(matches!(
            validate(&p, NAMES, &limits()),
            Err(ValidationError::BadDuration { .. })
        ));
        p.duration_s = 2.0;
        assert_eq!(validate(&p, NAMES, &limits()), Ok(()));
        p.duration_s = f64::NAN;
        assert!(validate(&p, NAMES, &limits()).is_err());
    }

    #[test]
    fn durations_and_timeouts_are_checked_even_on_counted_runs() {
        // Found by review: with iterations > 0 duration_s was not checked,
        // and the bandwidth loops' Duration::from_secs_f64 panicked on these.
        let mut p = params(8);
        p.iterations = 5;
        for bad in [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e20,
            -1.0,
            MAX_DURATION_S + 1.0,
        ] {
            p.duration_s = bad;
            let err = validate(&p, NAMES, &limits()).unwrap_err();
            assert!(matches!(err, ValidationError::BadDuration { .. }), "{bad}: {err}");
            assert!(err.to_string().contains("[0, 86400]"), "{err}");
        }
        p.duration_s = MAX_DURATION_S;
        assert_eq!(validate(&p, NAMES, &limits()), Ok(()));
        // A session deadline is now + timeout: a timeout near u64::MAX ms
        // would overflow the clock.
        p.duration_s = 0.0;
        p.timeout_ms = u64::MAX;
        let err = validate(&p, NAMES, &limits()).unwrap_err().to_string();
        assert!(err.contains("timeout_ms 18446744073709551615 is out of range"), "{err}");
        p.timeout_ms = MAX_TIMEOUT_MS;
        assert_eq!(validate(&p, NAMES, &limits()), Ok(()));
    }

    #[test]
    fn capability_override_parses_hex_and_decimal_or_is_refused() {
        let mut p = params(8);
        p.capability_override = "0x7f00dead0000:0x1a2b".into();
        assert_eq!(capability_override(&p), Some((0x7f00_dead_0000, 0x1a2b)));
        assert_eq!(validate(&p, NAMES, &limits()), Ok(()));
        p.capability_override = "4096:77".into();
        assert_eq!(capability_override(&p), Some((4096, 77)));
        for bad in ["0x1000", "zz:1", "1:0x1ffffffff", ":"] {
            p.capability_override = bad.into();
            let err = validate(&p, NAMES, &limits()).unwrap_err().to_string();
            assert!(
                err.contains("capability_override") && err.contains("ADDR:RKEY"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn unknown_workload_lists_the_supported_names() {
        let mut p = params(8);
        p.workload = "nope".into();
        let err = validate(&p, NAMES, &limits()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown workload \"nope\"; supported: write-read, read, write-bw"
        );
        p.workload.clear();
        assert_eq!(
            validate(&p, NAMES, &limits()),
            Err(ValidationError::Missing { field: "workload" })
        );
    }

    #[test]
    fn test_pattern_workloads_check_what_they_register() {
        let names = &["mr-cache", "param-server", "inference-ring"];
        let mut p = params(4096);
        p.workload = "mr-cache".into();
        assert_eq!(validate(&p, names, &limits()), Ok(()));
        p.size = DEFAULT_MAX_SIZE / 8;
        let err = validate(&p, names, &limits()).unwrap_err().to_string();
        assert!(err.contains("15 x size"), "{err}");
        let mut p = params(4096);
        p.workload = "param-server".into();
        p.num_qps = 3;
        assert_eq!(validate(&p, names, &limits()), Ok(()));
        p.size = 4097;
        let err = validate(&p, names, &limits()).unwrap_err().to_string();
        assert!(err.contains("multiple of 4"), "{err}");
        p.size = DEFAULT_MAX_SIZE / 2;
        let err = validate(&p, names, &limits()).unwrap_err().to_string();
        assert!(err.contains("3 gradient slots"), "{err}");
        let mut p = params(DEFAULT_MAX_SIZE / 8);
        p.workload = "inference-ring".into();
        assert_eq!(validate(&p, names, &limits()), Ok(()));
        p.tx_depth = 16;
        let err = validate(&p, names, &limits()).unwrap_err().to_string();
        assert!(err.contains("16 slots"), "{err}");
    }

    #[test]
    fn rejects_small_fields_out_of_range() {
        let mut p = params(8);
        p.gid_index = -2;
        assert!(validate(&p, NAMES, &limits())
            .unwrap_err()
            .to_string()
            .contains("gid_index"));
        let mut p = params(8);
        p.num_qps = 2;
        assert!(validate(&p, NAMES, &limits())
            .unwrap_err()
            .to_string()
            .contains("num_qps 2 is out of range"));
        p.workload = "write-bw".into();
        assert_eq!(validate(&p, NAMES, &limits()), Ok(()));
        p.num_qps = MAX_QPS + 1;
        assert!(validate(&p, NAMES, &limits())
            .unwrap_err()
            .to_string()
            .contains("num_qps 17 is out of range"));
        let mut p = params(8);
        p.tx_depth = 8;
        p.cq_moderation = 16;
        assert!(validate(&p, NAMES, &limits())
            .unwrap_err()
            .to_string()
            .contains("cq_moderation"));
    }

    #[test]
    fn test_bulk_total_is_capped_and_falls_back_to_size_times_iterations() {
        let mut p = params(1 << 20);
        p.workload = "bulk-rdma".into();
        p.total = 64 << 20;
        assert_eq!(validate(&p, &["bulk-rdma"], &limits()), Ok(()));
        p.total = MAX_BULK_TOTAL + 1;
        let err = validate(&p, &["bulk-rdma"], &limits()).unwrap_err().to_string();
        assert!(
            err.contains("total 1073741825 B is out of range") && err.contains("1 GiB"),
            "{err}"
        );
        // total 0: size x iterations.
        p.total = 0;
        p.iterations = 8;
        assert_eq!(bulk_total(&p), 8 << 20);
        assert_eq!(validate(&p, &["bulk-rdma"], &limits()), Ok(()));
        p.iterations = u64::MAX / 2;
        assert_eq!(bulk_total(&p), u64::MAX);
        let small = Limits {
            max_size: DEFAULT_MAX_SIZE,
            mem_available: Some(64 << 20),
        };
        p.total = 32 << 20;
        p.iterations = 1;
        let err = validate(&p, &["bulk-rdma"], &small).unwrap_err().to_string();
        assert!(err.contains("MemAvailable") && err.contains("16777216"), "{err}");
    }
}
