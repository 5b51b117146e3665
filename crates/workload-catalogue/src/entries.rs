//! The catalogue's entries, one per workload, in the order help texts list
//! them. Defaults are sized for emulated labs (a few MB/s): seconds, not
//! minutes.
//!
//! Completion defaults: the perftest pairs and bulk-rdma leave the mode to
//! the device (`auto`): on a software device (rxe, siw) a bandwidth client
//! sleeps while its send queue is full and the read-lat and atomic-lat
//! servers (no data-path work) sleep, which gives the CPU to the device's
//! kernel work where a busy poll competes with it (measured on the lab:
//! write-bw about 1.5x ib_write_bw, which always polls); on a NIC everything
//! polls, as perftest does. A latency client always polls (a sleep would be
//! the latency), and so does send-lat's server (its echo is inside each
//! round trip; sleeping put send-lat about 20 % behind ib_send_lat, whose
//! server spins). write-lat polls on both sides (its server echoes by
//! watching memory, as ib_write_lat's does).

use crate::model::{Collective, Defaults, Family, Fault, Metric, Opt, Shape, Workload};

const SKIP: &[Fault] = &[Fault::Skip];
const CORRUPT: &[Fault] = &[Fault::Corrupt];
const BOTH: &[Fault] = &[Fault::Skip, Fault::Corrupt];

const BW: &[Metric] = &[Metric::Bandwidth];
const LAT: &[Metric] = &[Metric::Latency];
const BW_LAT: &[Metric] = &[Metric::Bandwidth, Metric::Latency];

/// Options of a verbs workload on one QP.
const VERBS: &[Opt] = &[Opt::CmOob, Opt::Trace];
/// Options of a verbs workload that spreads over several QPs.
const VERBS_QPS: &[Opt] = &[Opt::CmOob, Opt::Trace, Opt::Qps];
/// Options of a libfabric workload.
const FABRIC: &[Opt] = &[Opt::Provider, Opt::Trace];

/// Bytes a bulk transfer moves unless told otherwise: 4 MiB, under a second
/// on the emulated lab.
const BULK_TOTAL: u64 = 4 << 20;
/// Chunk of a bulk transfer unless told otherwise.
const BULK_CHUNK: u64 = 256 << 10;
const BULK: Defaults = Defaults {
    total: BULK_TOTAL,
    ..Defaults::of(BULK_CHUNK, BULK_TOTAL / BULK_CHUNK)
};

const fn verbs(
    name: &'static str,
    doc: &'static str,
    defaults: Defaults,
    faults: &'static [Fault],
    opts: &'static [Opt],
    metrics: &'static [Metric],
) -> Workload {
    Workload {
        name,
        family: Family::Verbs,
        shape: Shape::Pair,
        doc,
        defaults,
        faults,
        opts,
        metrics,
    }
}

/// Options of a collective; the ones with a root also take `--root`. Its
/// verbs ranks connect through rdma_cm, or with `--cm oob` through the
/// controller.
const COLLECTIVE: &[Opt] = &[Opt::Nodes, Opt::Warmup, Opt::Provider, Opt::Trace, Opt::CmOob];
const ROOTED: &[Opt] = &[
    Opt::Nodes,
    Opt::Warmup,
    Opt::Root,
    Opt::Provider,
    Opt::Trace,
    Opt::CmOob,
];
/// 64 KiB x 20 operations: about a second per collective on four emulated nodes.
const COLLECTIVE_DEFAULTS: Defaults = Defaults::of(65536, 20).auto();

const fn collective(name: &'static str, op: Collective, doc: &'static str) -> Workload {
    Workload {
        name,
        family: Family::Verbs,
        shape: Shape::Collective(op),
        doc,
        defaults: COLLECTIVE_DEFAULTS,
        faults: BOTH,
        opts: if op.has_root() { ROOTED } else { COLLECTIVE },
        metrics: &[Metric::BusBandwidth],
    }
}

const fn fabric(
    name: &'static str,
    doc: &'static str,
    defaults: Defaults,
    faults: &'static [Fault],
    metrics: &'static [Metric],
) -> Workload {
    Workload {
        name,
        family: Family::Libfabric,
        shape: Shape::Pair,
        doc,
        defaults,
        faults,
        opts: FABRIC,
        metrics,
    }
}

/// Every workload.
pub static CATALOGUE: &[Workload] = &[
    verbs(
        "write-read",
        "the client WRITEs a seeded payload and READs it back; both sides verify",
        Defaults::of(4096, 16),
        CORRUPT,
        VERBS,
        BW,
    ),
    verbs(
        "write-imm",
        "WRITE_WITH_IMM per batch (imm = batch id), then a zero-length notification; the server checks data and order",
        Defaults {
            batches: 8,
            ..Defaults::of(4096, 16)
        },
        BOTH,
        &[Opt::CmOob, Opt::Trace, Opt::Batches],
        BW,
    ),
    verbs(
        "send-recv",
        "two-sided SEND into pre-posted RECVs (--ping-pong echoes each); every message verified",
        Defaults::of(4096, 16),
        BOTH,
        &[Opt::CmOob, Opt::Trace, Opt::PingPong],
        BW_LAT,
    ),
    verbs(
        "read",
        "the client READs a seeded pattern from the server and verifies it",
        Defaults::of(4096, 16),
        CORRUPT,
        VERBS,
        BW,
    ),
    verbs(
        "atomic",
        "fetch-and-add and compare-and-swap on a remote 8-byte word, checked against the expected value",
        Defaults::of(8, 64),
        SKIP,
        VERBS,
        BW,
    ),
    verbs(
        "write-bw",
        "RDMA WRITE bandwidth as ib_write_bw measures it",
        Defaults::of(65536, 200).auto(),
        BOTH,
        VERBS_QPS,
        BW,
    ),
    verbs(
        "read-bw",
        "RDMA READ bandwidth as ib_read_bw measures it",
        Defaults::of(65536, 200).auto(),
        BOTH,
        VERBS_QPS,
        BW,
    ),
    verbs(
        "send-bw",
        "SEND bandwidth as ib_send_bw measures it",
        Defaults::of(65536, 200).auto(),
        BOTH,
        VERBS_QPS,
        BW,
    ),
    verbs(
        "atomic-bw",
        "atomic operation rate as ib_atomic_bw measures it",
        Defaults::of(8, 500).auto(),
        SKIP,
        VERBS_QPS,
        BW,
    ),
    verbs(
        "write-lat",
        "RDMA WRITE ping-pong latency as ib_write_lat measures it",
        Defaults::of(2, 200),
        BOTH,
        VERBS,
        LAT,
    ),
    verbs(
        "read-lat",
        "RDMA READ latency as ib_read_lat measures it",
        Defaults::of(2, 200).auto(),
        BOTH,
        VERBS,
        LAT,
    ),
    verbs(
        "send-lat",
        "SEND ping-pong latency as ib_send_lat measures it",
        Defaults::of(2, 200).auto(),
        BOTH,
        VERBS,
        LAT,
    ),
    verbs(
        "atomic-lat",
        "atomic operation latency as ib_atomic_lat measures it",
        Defaults::of(2, 200).auto(),
        SKIP,
        VERBS,
        LAT,
    ),
    // 64 pages of 64 KiB scattered over the client's two 16 MiB MRs: 4 MiB,
    // under a second at the emulated lab's ~7 MB/s.
    fabric(
        "fabric-write",
        "RDM endpoints: the server writes pages of an MT19937-64 stream into the client's MRs; every page verified",
        Defaults::of(65536, 64),
        CORRUPT,
        BW,
    ),
    fabric(
        "fabric-bw",
        "RDM fi_writemsg bandwidth; the server checks every slot and its sequence number",
        Defaults::of(65536, 200),
        SKIP,
        BW,
    ),
    fabric(
        "fabric-lat",
        "RDM send/recv ping-pong latency, as fi_pingpong; every ping and echo verified",
        Defaults::of(2, 200),
        CORRUPT,
        LAT,
    ),
    // 40 uses of 4..32 KiB, twice (uncached, cached): about 1.2 MiB.
    verbs(
        "mr-cache",
        "WRITEs from buffers registered per use and through a registration cache; the saving measured",
        Defaults::of(4096, 40),
        CORRUPT,
        VERBS,
        &[Metric::Bandwidth, Metric::MrCache],
    ),
    // 8 rounds of 2 workers x 4 KiB pushed and pulled.
    verbs(
        "param-server",
        "workers (one QP each) WRITE gradients, the server sums them, every worker READs the weights back",
        Defaults {
            qps: 2,
            ..Defaults::of(4096, 8)
        },
        CORRUPT,
        VERBS_QPS,
        BW_LAT,
    ),
    // 64 batches of 4 KiB through an 8-slot ring.
    verbs(
        "inference-ring",
        "WRITE_WITH_IMM batches into a ring of slots on the server, with credits as backpressure",
        Defaults {
            tx_depth: 8,
            ..Defaults::of(4096, 64)
        },
        BOTH,
        &[Opt::CmOob, Opt::Trace, Opt::Batches],
        BW_LAT,
    ),
    verbs(
        "bulk-rdma",
        "--total bytes by RDMA WRITE in --size chunks into the server's buffer; every byte verified",
        BULK.auto(),
        CORRUPT,
        &[Opt::CmOob, Opt::Trace, Opt::Total],
        BW,
    ),
    collective(
        "allreduce",
        Collective::Allreduce,
        "every rank ends with the sum of all ranks' float32 buffers (ring over RDMA WRITE_WITH_IMM); every element checked",
    ),
    collective(
        "allgather",
        Collective::Allgather,
        "every rank ends with every rank's block, in rank order (ring); every element checked",
    ),
    collective(
        "reduce-scatter",
        Collective::ReduceScatter,
        "rank r ends with block r of the sum of all ranks' buffers (ring); every element checked",
    ),
    collective(
        "reduce",
        Collective::Reduce,
        "the root ends with the sum of all ranks' float32 buffers, written into it at once; every element checked",
    ),
    collective(
        "alltoall",
        Collective::Alltoall,
        "rank r's block j goes to rank j; every element checked",
    ),
    collective(
        "broadcast",
        Collective::Broadcast,
        "the root's buffer is written into every rank; every element checked",
    ),
    collective(
        "incast",
        Collective::Incast,
        "every rank but the root writes its buffer into the root at once; per-sender throughput and fairness; every element checked",
    ),
    Workload {
        name: "bulk-tcp",
        family: Family::Tcp,
        shape: Shape::Pair,
        doc: "the same bytes as bulk-rdma over a TCP socket between the same data addresses",
        defaults: BULK,
        faults: CORRUPT,
        opts: &[Opt::Total],
        metrics: BW,
    },
];
