use clap::Parser;

use super::*;
use crate::bench::Phase;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("crescent").chain(args.iter().copied()))
}

#[test]
fn globals_go_anywhere_and_default() {
    let cli = parse(&["put", "k", "f.bin", "--tenant", "t1", "--json"]).unwrap();
    assert_eq!(cli.tenant.as_deref(), Some("t1"));
    assert!(cli.json);
    assert_eq!(cli.domain, None);
    assert!(
        matches!(cli.command, Command::Put { ref key, ref file, upsert: false, replicas: 1 } if key == "k" && file == "f.bin")
    );
    let cli = parse(&["--server", "h:1", "--domain", "d", "exist", "k"]).unwrap();
    assert_eq!(cli.server.as_deref(), Some("h:1"));
    assert_eq!(cli.domain.as_deref(), Some("d"));
    let unset = ["CRESCENT_SERVER", "CRESCENT_ETCD", "CRESCENT_CLUSTER"]
        .iter()
        .all(|v| std::env::var_os(v).is_none());
    if unset {
        let options = parse(&["ls"]).unwrap().client_options();
        assert_eq!(options.servers, vec![DEFAULT_SERVER.to_string()]);
        assert!(!options.uses_etcd());
    }
}

#[test]
fn leader_following_flags() {
    let cli = parse(&[
        "owner",
        "--size",
        "1M",
        "--etcd",
        "http://e1:2379,http://e2:2379",
        "--cluster",
        "prod",
        "--failover-timeout-ms",
        "9000",
    ])
    .unwrap();
    let options = cli.client_options();
    assert_eq!(
        options.etcd_endpoints,
        vec!["http://e1:2379".to_string(), "http://e2:2379".to_string()]
    );
    assert_eq!(options.cluster.as_deref(), Some("prod"));
    if std::env::var_os("CRESCENT_SERVER").is_none() {
        assert!(options.servers.is_empty(), "no default server with --etcd");
    }
    assert_eq!(options.failover.timeout, std::time::Duration::from_secs(9));
    assert!(options.validate().is_ok());

    let cli = parse(&["--server", "a:1, b:2", "get", "k"]).unwrap();
    assert_eq!(cli.client_options().servers, vec!["a:1", "b:2"]);
    let cli = parse(&["--cluster", "prod", "--server", "a:1", "ls"]).unwrap();
    if std::env::var_os("CRESCENT_ETCD").is_none() {
        assert!(
            cli.client_options().validate().is_err(),
            "--cluster needs --etcd"
        );
    }
}

#[test]
fn get_output_and_stdin_put() {
    let cli = parse(&["get", "k", "-o", "out.bin"]).unwrap();
    assert!(
        matches!(cli.command, Command::Get { ref output, .. } if output.as_deref() == Some("out.bin"))
    );
    let cli = parse(&["get", "k", "-o", "-"]).unwrap();
    assert!(
        matches!(cli.command, Command::Get { ref output, .. } if output.as_deref() == Some("-"))
    );
    let cli = parse(&["put", "k", "-"]).unwrap();
    assert!(matches!(cli.command, Command::Put { ref file, .. } if file == "-"));
    assert!(parse(&["put", "k"]).is_err(), "FILE is required");
}

#[test]
fn ls_prefix_is_optional() {
    assert!(matches!(
        parse(&["ls"]).unwrap().command,
        Command::Ls { prefix: None }
    ));
    assert!(
        matches!(parse(&["ls", "p/"]).unwrap().command, Command::Ls { prefix: Some(ref p) } if p == "p/")
    );
}

#[test]
fn owner_and_bench_arguments() {
    let cli = parse(&[
        "owner",
        "--size",
        "64M",
        "--id",
        "n1",
        "--listen",
        "0.0.0.0:9000",
        "--advertise",
        "10.0.0.1:9000",
    ])
    .unwrap();
    match cli.command {
        Command::Owner {
            size,
            listen,
            advertise,
            id,
            resident,
            cold_device,
            cold_staging_bytes,
            cold_staging_ttl_ms,
            metrics_listen,
            transport,
        } => {
            assert_eq!(transport, TransportArg::Tcp, "tcp unless asked");
            assert!(cold_device.is_empty());
            assert_eq!(metrics_listen, None, "no metrics listener unless asked");
            assert_eq!(
                (cold_staging_bytes, cold_staging_ttl_ms),
                (128 << 20, 5_000)
            );
            assert_eq!(size, 64 << 20);
            assert_eq!(listen, "0.0.0.0:9000");
            assert_eq!(advertise.as_deref(), Some("10.0.0.1:9000"));
            assert_eq!(id.as_deref(), Some("n1"));
            assert!(!resident, "lazily committed unless asked");
        }
        other => panic!("{other:?}"),
    }
    match parse(&["owner", "--size", "1G", "--resident"])
        .unwrap()
        .command
    {
        Command::Owner { resident, .. } => assert!(resident),
        other => panic!("{other:?}"),
    }
    match parse(&[
        "owner",
        "--size",
        "1G",
        "--cold-device",
        "a=/x,capacity=1G",
        "--cold-device",
        "b=/y",
    ])
    .unwrap()
    .command
    {
        Command::Owner { cold_device, .. } => {
            let ids: Vec<_> = cold_device.iter().map(|d| d.device_id.as_str()).collect();
            assert_eq!(ids, ["a", "b"]);
            assert_eq!(cold_device[0].capacity, 1 << 30);
        }
        other => panic!("{other:?}"),
    }
    assert!(parse(&["owner", "--size", "1G", "--cold-device", "nodir"]).is_err());
    assert!(parse(&["owner"]).is_err(), "--size is required");
    match parse(&["bench", "--json"]).unwrap().command {
        Command::Bench {
            n,
            size,
            batch,
            only,
            owner_token,
            owner_id,
        } => {
            assert_eq!((n, size, batch), (20_000, 4096, 128));
            assert_eq!(Phase::selected(&only), Phase::ALL.to_vec());
            assert_eq!((owner_token, owner_id), (None, None));
        }
        other => panic!("{other:?}"),
    }
    let owned = ["bench", "--owner-token", "t0k", "--owner-id", "o1"];
    match parse(&owned).unwrap().command {
        Command::Bench {
            owner_token,
            owner_id,
            ..
        } => assert_eq!(
            (owner_token.as_deref(), owner_id.as_deref()),
            (Some("t0k"), Some("o1"))
        ),
        other => panic!("{other:?}"),
    }
    match parse(&[
        "bench",
        "--only",
        "get_batch,put_batch",
        "--only",
        "put_batch",
    ])
    .unwrap()
    .command
    {
        Command::Bench { only, .. } => assert_eq!(
            Phase::selected(&only),
            vec![Phase::PutBatch, Phase::GetBatch],
            "run order, each once"
        ),
        other => panic!("{other:?}"),
    }
    assert!(parse(&["bench", "--only", "put,scan"]).is_err());
    assert!(parse(&["bench", "--only", ""]).is_err());
    match parse(&["bench", "--n", "2000", "--size", "1K"])
        .unwrap()
        .command
    {
        Command::Bench { n, size, .. } => assert_eq!((n, size), (2000, 1024)),
        other => panic!("{other:?}"),
    }
    assert!(parse(&["bench", "--n", "many"]).is_err());
}

#[test]
fn segments_commands_still_parse() {
    let cli = parse(&[
        "segments",
        "mount",
        "--owner",
        "o",
        "--segment",
        "s",
        "--size",
        "1G",
        "--transport",
        "embedded",
    ])
    .unwrap();
    match cli.command {
        Command::Segments {
            command:
                SegmentsCommand::Mount {
                    size,
                    transport,
                    base,
                    ..
                },
        } => {
            assert_eq!(size, 1 << 30);
            assert_eq!(transport, TransportArg::Embedded);
            assert_eq!(base, 0);
        }
        other => panic!("{other:?}"),
    }
    assert!(parse(&["segments", "ls", "--json"]).is_ok());
    assert!(parse(&["segments", "unmount", "--segment", "s"]).is_ok());
    assert!(parse(&["status"]).is_ok());
    assert!(parse(&["rm", "k", "--force"]).is_ok());
    assert!(parse(&["frobnicate"]).is_err());
}

/// Every argument of every command, with the command path it belongs to.
fn every_argument(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
    for arg in cmd.get_arguments() {
        out.push((path.to_string(), arg.clone()));
    }
    for sub in cmd.get_subcommands() {
        every_argument(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

#[test]
fn every_argument_has_help_and_globals_have_their_heading() {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    let mut args = Vec::new();
    every_argument(&cmd, "crescent", &mut args);
    let missing: Vec<String> = args
        .iter()
        .filter(|(_, a)| !matches!(a.get_id().as_str(), "help" | "version"))
        .filter(|(_, a)| a.get_help().is_none_or(|h| h.to_string().trim().is_empty()))
        .map(|(path, a)| format!("{path} {}", a.get_id()))
        .collect();
    assert!(
        missing.is_empty(),
        "arguments without help text: {missing:#?}"
    );
    let misplaced: Vec<String> = args
        .iter()
        .filter(|(path, a)| path == "crescent" && a.is_global_set())
        .filter(|(_, a)| a.get_help_heading() != Some(GLOBAL_OPTIONS))
        .map(|(_, a)| a.get_id().to_string())
        .collect();
    assert!(
        misplaced.is_empty(),
        "global options outside their heading: {misplaced:?}"
    );
}
