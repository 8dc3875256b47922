//! `lacuna`: the daemon (`lacuna serve`) and the CLI that drives it through the
//! control API.

/// mimalloc instead of glibc's malloc: the data path allocates and frees
/// buffers of a few KiB to a few MiB per request, which glibc kept returning
/// to the kernel and faulting back in (page faults and page clearing were a
/// tenth of the daemon's time under 4 KiB random writes).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod allocator;

mod cli;
mod client;
mod descriptors;
mod duration;
mod gateway_cli;
// The host registry: its own crate, so that the API's tests run against it too.
use lacuna_hosts as hosts;
mod monitor_cli;
mod nbd_export;
mod protocol_endpoint;
mod rados_shard;
mod sampler;
mod scrub;
mod scsi_backend;
mod serve;
use lacuna_api::size;
mod table;
mod vasa_cli;
mod vasa_provider;
mod vvol_cli;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "lacuna",
    version,
    about = "Lacuna: a software storage array (thin, deduplicated, compressed volumes over NBD and iSCSI)"
)]
struct Cli {
    /// The API to talk to.
    #[arg(
        long,
        global = true,
        env = "LACUNA_API",
        default_value = "http://127.0.0.1:8080"
    )]
    api: String,
    /// The API token (default: read from the data directory's api-token).
    #[arg(long, global = true, env = "LACUNA_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Data directory (for `serve`, and where the CLI finds the API token).
    #[arg(
        long,
        global = true,
        env = "LACUNA_DATA_DIR",
        default_value = "./lacuna-data"
    )]
    data_dir: PathBuf,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the array: NBD and the control API on loopback by default.
    Serve(ServeArgs),
    /// Volumes: create (thin or thick), list, show, resize, clone, restore,
    /// range copy, delete, recover and eradicate.
    #[command(subcommand)]
    Volume(cli::VolumeCommand),
    /// Snapshots, alone or as a consistency group: create, list, show, delete,
    /// recover and eradicate.
    #[command(subcommand)]
    Snapshot(cli::SnapshotCommand),
    /// Storage containers (quota, reclaim rate, compression, dedup): create,
    /// list, show (--reclaim for the reclaim counters), set, reclaim --now and
    /// delete.
    #[command(subcommand)]
    Container(cli::ContainerCommand),
    /// Array-wide reports: space now, and figures over time.
    #[command(subcommand)]
    Array(cli::ArrayCommand),
    /// Hosts and LUN masking for iSCSI and NBD: create, list, show, delete, set
    /// the NBD key, connect and disconnect volumes.
    #[command(subcommand)]
    Host(cli::HostCommand),
    /// The event log: list (what an administrator must know, with severity)
    /// and acknowledge.
    #[command(subcommand)]
    Event(monitor_cli::EventCommand),
    /// Gateways sharing the array's Ceph pool (serve --store rados): each
    /// one's state (owner, standby, gone), portals, and each shard's owner.
    #[command(subcommand)]
    Gateway(gateway_cli::GatewayCommand),
    /// Virtual volumes (vVols): create, list, show, delete, set metadata,
    /// resize, clone, revert, snapshot in batches, bind and unbind to hosts,
    /// allocation bitmaps and events.
    #[command(subcommand)]
    Vvol(vvol_cli::VvolCommand),
    /// The VASA provider vCenter registers: its status and certificate, a
    /// restart, a new self-signed certificate.
    #[command(subcommand)]
    Vasa(vasa_cli::VasaCommand),
    /// Read back and verify every stored record on the running daemon, with
    /// progress and a summary of bad records and the volume ranges they affect;
    /// fails when any record is bad.
    Scrub(ScrubArgs),
}

#[derive(Args)]
pub struct ScrubArgs {
    /// Most MB (10^6 bytes) of records read per second; unlimited by default.
    /// A pass running at another rate is replaced.
    #[arg(long, conflicts_with = "cancel")]
    rate: Option<f64>,
    /// Stop the running pass instead (and print what it had checked).
    #[arg(long)]
    cancel: bool,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Physical capacity the array may use (e.g. 64G); default: 16 GiB or half the
    /// free space of the data directory's filesystem, whichever is less.
    #[arg(long, value_parser = size::parse_size)]
    capacity: Option<u64>,
    /// NBD listen address.
    #[arg(long, default_value = "127.0.0.1:10809")]
    nbd_listen: SocketAddr,
    /// Control API listen address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    api_listen: SocketAddr,
    /// VASA provider (HTTPS, SOAP) listen address.
    #[arg(long, default_value = "127.0.0.1:8443")]
    vasa_listen: SocketAddr,
    /// Run without the VASA provider.
    #[arg(long)]
    no_vasa: bool,
    /// iSCSI portal (repeat for several portals; initiators see all of them).
    #[arg(long = "iscsi-listen", default_value = "127.0.0.1:3260")]
    iscsi_listen: Vec<SocketAddr>,
    /// iSCSI target name; default derived from the array name.
    #[arg(long)]
    iscsi_target_name: Option<String>,
    /// Quick start: initiators that belong to no host see every volume, without
    /// CHAP. Off by default: unknown initiators see nothing.
    #[arg(long)]
    iscsi_open_access: bool,
    /// Microseconds an iSCSI connection polls its socket, once it has answered
    /// everything, before it sleeps (0: never). Polling spares a wake-up per
    /// command at low queue depth, which is dear where idle cores halt (VMs).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=1000))]
    iscsi_poll_us: u32,
    /// Microseconds an NBD connection (plain TCP) polls its socket, once it
    /// has answered everything, before it sleeps (0: never); as
    /// --iscsi-poll-us.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=1000))]
    nbd_poll_us: u32,
    /// Quick start: NBD clients without TLS (anonymous) list and open every
    /// volume and snapshot. Off by default: they see nothing, and only hosts
    /// with an NBD key (TLS-PSK) open the volumes connected to them.
    #[arg(long)]
    nbd_open_access: bool,
    /// NBD TLS (pre-shared keys of hosts, identity = host name): off, on
    /// (STARTTLS offered, plain clients anonymous) or require (nothing but
    /// STARTTLS before TLS).
    #[arg(long, value_enum, default_value = "on")]
    nbd_tls: serve::NbdTls,
    /// Physical use, in percent of capacity, at which the array raises its
    /// soft-threshold event (SCSI: UNIT ATTENTION 38h/07h).
    #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u8).range(1..=100))]
    soft_threshold_percent: u8,
    /// How long deleted volumes and snapshots stay recoverable (e.g. 24h, 30m, 0s).
    #[arg(long, default_value = "24h", value_parser = duration::parse_duration_s)]
    destroy_retention: u64,
    /// Most memory the metadata page cache may take (e.g. 1G, 256M); it grows
    /// as metadata is read. Too small for the written data, and reclaim or
    /// cold reads evict what busy volumes use.
    #[arg(long, default_value = "1G", value_parser = size::parse_size)]
    metadata_cache: u64,
    /// When new data is compressed: `inline` always on the write path;
    /// `adaptive` inline unless the write path is short of CPU, when large
    /// writes store raw grains for the background reducer; `background`
    /// always by the reducer. Pattern removal and dedup are always inline.
    #[arg(long, value_enum, default_value_t = Reduction::Inline)]
    reduction: Reduction,
    /// Scrub continuously in the background at this many MB/s (10^6 bytes):
    /// every stored record is read back and verified, pass after pass.
    #[arg(long)]
    scrub_rate: Option<f64>,
    /// Where segments and metadata live: the data directory (local), or a
    /// Ceph pool (rados: --ceph-conf and --pool; docs/SCALE-OUT.md).
    #[arg(long, value_enum, default_value = "local")]
    store: StoreKind,
    /// The Ceph configuration file (--store rados).
    #[arg(long, required_if_eq("store", "rados"))]
    ceph_conf: Option<PathBuf>,
    /// The Ceph pool (--store rados).
    #[arg(long, required_if_eq("store", "rados"))]
    pool: Option<String>,
    /// This gateway's name among those sharing the pool (--store rados);
    /// default: the host name and process id.
    #[arg(long, value_parser = parse_gateway_id)]
    gateway_id: Option<String>,
    /// The shard this gateway serves or stands by for (--store rados): one
    /// array (its containers, volumes, vVols, hosts and identity) in a RADOS
    /// namespace of the pool. Run one `serve` per shard; gateways of
    /// different shards serve side by side (docs/SCALE-OUT.md).
    #[arg(long, default_value = lacuna_rados_store::membership::DEFAULT_SHARD, value_parser = parse_shard)]
    shard: String,
    /// Seconds of the shard's ownership lease (--store rados): how long a
    /// dead gateway keeps its shard before another takes it over.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(2..=300))]
    lease_s: u64,
    /// This gateway's ALUA target port group (--store rados), 1 to 64 and
    /// different on each gateway of the pool: multipath initiators see the
    /// owner's group active/optimized and the others' standby (or offline
    /// once gone). Without it the gateway is the one group of a single array.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    port_group: Option<u16>,
    /// Log filter (e.g. info, debug, lacuna_nbd=debug).
    #[arg(long, env = "LACUNA_LOG", default_value = "info")]
    log: String,
}

/// Where `serve` keeps segments and metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum StoreKind {
    /// The data directory.
    Local,
    /// A Ceph RADOS pool.
    Rados,
}

/// `HOST-PID`: unique among the gateways of one pool as long as host names are.
fn default_gateway_id() -> String {
    let host: String = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(40)
        .collect();
    let host = if host.is_empty() {
        "gateway".into()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}

fn parse_gateway_id(text: &str) -> Result<String, String> {
    if lacuna_rados_store::membership::valid_gateway_id(text) {
        Ok(text.to_string())
    } else {
        Err(format!(
            "a gateway id is 1 to {} letters, digits, '-', '_' or '.'",
            lacuna_rados_store::membership::MAX_GATEWAY_ID_BYTES
        ))
    }
}

fn parse_shard(text: &str) -> Result<String, String> {
    if lacuna_rados_store::membership::valid_shard_name(text) {
        Ok(text.to_string())
    } else {
        Err(format!(
            "a shard is 1 to {} lowercase letters, digits or '-', starting with a letter (not '{}')",
            lacuna_rados_store::membership::MAX_SHARD_NAME_BYTES,
            lacuna_rados_store::membership::NAMESPACE
        ))
    }
}

/// Where a gateway serves, for its membership record.
fn portals(
    api: &std::net::SocketAddr,
    nbd: &std::net::SocketAddr,
    iscsi: &[std::net::SocketAddr],
) -> Vec<(String, String)> {
    let mut portals = vec![
        ("api".to_string(), api.to_string()),
        ("nbd".to_string(), nbd.to_string()),
    ];
    portals.extend(iscsi.iter().map(|a| ("iscsi".to_string(), a.to_string())));
    portals
}

/// `serve --reduction`: when new data is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Reduction {
    Inline,
    Adaptive,
    Background,
}

fn main() -> ExitCode {
    // First, while this is the only thread (mimalloc's options are not
    // thread-safe to set).
    allocator::keep_freed_memory();
    let cli = Cli::parse();
    let result =
        match cli.command {
            Command::Serve(args) => {
                init_logging(&args.log);
                allocator::no_transparent_huge_pages();
                let scrub_rate = args
                    .scrub_rate
                    .map(scrub::rate_bytes_per_s)
                    .transpose()
                    .map_err(|e| e.context("--scrub-rate"));
                scrub_rate.and_then(|scrub_rate| {
                    serve::run(serve::ServeConfig {
                        data_dir: cli.data_dir,
                        capacity_bytes: args.capacity,
                        nbd_listen: args.nbd_listen,
                        api_listen: args.api_listen,
                        vasa_listen: (!args.no_vasa).then_some(args.vasa_listen),
                        iscsi_listen: args.iscsi_listen.clone(),
                        iscsi_target_name: args.iscsi_target_name,
                        iscsi_open_access: args.iscsi_open_access,
                        iscsi_poll_us: args.iscsi_poll_us,
                        nbd_poll_us: args.nbd_poll_us,
                        nbd_open_access: args.nbd_open_access,
                        nbd_tls: args.nbd_tls,
                        soft_threshold_percent: args.soft_threshold_percent,
                        destroy_retention_s: args.destroy_retention,
                        metadata_cache_bytes: args.metadata_cache,
                        reduction: match args.reduction {
                            Reduction::Inline => lacuna_engine::ReductionMode::Inline,
                            Reduction::Adaptive => lacuna_engine::ReductionMode::Adaptive,
                            Reduction::Background => lacuna_engine::ReductionMode::Background,
                        },
                        scrub_rate_bytes_per_s: scrub_rate,
                        rados: match args.store {
                            StoreKind::Local => None,
                            StoreKind::Rados => Some(rados_shard::RadosStore {
                                ceph_conf: args.ceph_conf.expect("required by clap"),
                                pool: args.pool.expect("required by clap"),
                                gateway: args.gateway_id.unwrap_or_else(default_gateway_id),
                                shard: args.shard,
                                lease: std::time::Duration::from_secs(args.lease_s),
                                port_group: args.port_group,
                                portals: portals(
                                    &args.api_listen,
                                    &args.nbd_listen,
                                    &args.iscsi_listen,
                                ),
                            }),
                        },
                    })
                })
            }
            Command::Volume(command) => client::Client::new(&cli.api, cli.token, &cli.data_dir)
                .and_then(|c| cli::run_volume(&c, command, cli.json)),
            Command::Snapshot(command) => client::Client::new(&cli.api, cli.token, &cli.data_dir)
                .and_then(|c| cli::run_snapshot(&c, command, cli.json)),
            Command::Container(command) => client::Client::new(&cli.api, cli.token, &cli.data_dir)
                .and_then(|c| cli::run_container(&c, command, cli.json)),
            Command::Array(command) => client::Client::new(&cli.api, cli.token, &cli.data_dir)
                .and_then(|c| cli::run_array(&c, command, cli.json)),
            Command::Host(command) => client::Client::new(&cli.api, cli.token, &cli.data_dir)
                .and_then(|c| cli::run_host(&c, command, cli.json)),
            Command::Event(command) => client::Client::new(&cli.api, cli.token, &cli.data_dir)
                .and_then(|c| monitor_cli::run_event(&c, command, cli.json)),
            Command::Gateway(command) => gateway_cli::run(
                || client::Client::new(&cli.api, cli.token, &cli.data_dir),
                command,
                cli.json,
            ),
            Command::Vvol(command) => client::Client::new(&cli.api, cli.token, &cli.data_dir)
                .and_then(|c| vvol_cli::run(&c, command, cli.json)),
            Command::Vasa(command) => client::Client::new(&cli.api, cli.token, &cli.data_dir)
                .and_then(|c| vasa_cli::run(&c, command, cli.json)),
            Command::Scrub(args) => client::Client::new(&cli.api, cli.token, &cli.data_dir)
                .and_then(|c| match args.cancel {
                    true => scrub::cancel(&c, cli.json),
                    false => scrub::run(&c, args.rate, cli.json),
                }),
        };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line: the error and its causes, no backtrace, so scripts and
            // people see the cause at once.
            let chain: Vec<String> = error.chain().map(|e| e.to_string()).collect();
            eprintln!("lacuna: {}", chain.join(": ").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: a log file keeps plain `key=value` fields.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
}
