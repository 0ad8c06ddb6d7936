//! The owner device mailbox: calls wait for the owner's poll, results are correlated by id,
//! a silent or restarted owner fails the callers, and read bytes are verified on arrival.

use std::sync::Arc;
use std::time::Duration;

use crescent_cold::io::ColdIo;
use crescent_cold::{payload_checksum, ColdError};
use crescent_wire::cold_owner::{OwnerIoItem, OwnerIoOutcome, OwnerIoWork};

use super::{Mailbox, OwnerDeviceIo};

const WAIT: Duration = Duration::from_secs(5);

fn owner_io() -> OwnerDeviceIo {
    let counter = prometheus::IntCounterVec::new(
        prometheus::Opts::new("owner_io_total", "test"),
        &["work", "outcome"],
    )
    .unwrap();
    OwnerDeviceIo::new("dev", "node-b", counter)
}

/// Polls once as the owner and answers every item with `answer`.
fn serve_once(
    io: &OwnerDeviceIo,
    incarnation: u64,
    answer: impl Fn(&OwnerIoWork) -> OwnerIoOutcome,
) {
    let items = io.poll(incarnation, None, Vec::new(), WAIT).unwrap();
    assert!(!items.is_empty(), "the call's item is handed out");
    let results = items.iter().map(|i| (i.id, answer(&i.work))).collect();
    assert!(io
        .poll(incarnation, None, results, Duration::ZERO)
        .unwrap()
        .is_empty());
}

#[test]
fn a_device_whose_owner_never_registered_is_not_connected() {
    let io = owner_io();
    let err = io.delete("objects/aa/x.cold").unwrap_err();
    assert_eq!(err.code(), crescent_wire::ErrorCode::Unavailable, "{err}");
    assert!(err.to_string().contains("node-b"), "{err}");
    assert!(io.probe().is_err());
    // A poll before registering is told to register.
    assert_eq!(
        io.poll(1, None, Vec::new(), Duration::ZERO)
            .unwrap_err()
            .code(),
        crescent_wire::ErrorCode::NotFound
    );
}

#[test]
fn a_call_is_answered_through_the_next_poll() {
    let io = Arc::new(owner_io());
    io.connect(7);
    assert!(io.probe().is_ok());
    let caller = {
        let io = io.clone();
        std::thread::spawn(move || io.delete("objects/aa/x.cold"))
    };
    serve_once(&io, 7, |work| {
        assert_eq!(
            work,
            &OwnerIoWork::Delete {
                locator: "objects/aa/x.cold".into()
            }
        );
        OwnerIoOutcome::Deleted { existed: true }
    });
    assert_eq!(caller.join().unwrap(), Ok(true));
}

#[test]
fn read_bytes_are_verified_on_arrival() {
    let io = Arc::new(owner_io());
    io.connect(1);
    let good = b"payload".to_vec();
    let crc = payload_checksum(&good);
    let reader = {
        let io = io.clone();
        std::thread::spawn(move || io.read("l", 7, crc))
    };
    serve_once(&io, 1, |_| OwnerIoOutcome::Read {
        bytes: b"payloaD".to_vec(),
    });
    assert!(matches!(
        reader.join().unwrap(),
        Err(ColdError::ChecksumMismatch { .. })
    ));
    let reader = {
        let io = io.clone();
        std::thread::spawn(move || io.read("l", 7, crc))
    };
    serve_once(&io, 1, |_| OwnerIoOutcome::Read {
        bytes: good.clone(),
    });
    assert_eq!(reader.join().unwrap().unwrap(), good);
}

#[test]
fn an_owner_error_keeps_its_code() {
    let io = Arc::new(owner_io());
    io.connect(1);
    let reader = {
        let io = io.clone();
        std::thread::spawn(move || io.read("l", 7, 1))
    };
    serve_once(&io, 1, |_| {
        OwnerIoOutcome::Failed(crescent_wire::cold_owner::OwnerIoError {
            kind: "checksum_mismatch".into(),
            message: "m".into(),
            locator: "l".into(),
            expected: 1,
            actual: 2,
        })
    });
    let err = reader.join().unwrap().unwrap_err();
    assert_eq!(err.code(), crescent_wire::ErrorCode::Internal);
    assert!(err.to_string().contains("checksum"), "{err}");
}

#[test]
fn a_new_incarnation_fails_the_waiting_calls_and_the_old_one_is_refused() {
    let io = Arc::new(owner_io());
    io.connect(1);
    let caller = {
        let io = io.clone();
        std::thread::spawn(move || io.delete("l"))
    };
    // The first incarnation takes the item and dies without answering.
    let items = io.poll(1, None, Vec::new(), WAIT).unwrap();
    assert_eq!(items.len(), 1);
    io.connect(2);
    let err = caller.join().unwrap().unwrap_err();
    assert_eq!(err.code(), crescent_wire::ErrorCode::Unavailable, "{err}");
    assert_eq!(
        io.poll(1, None, Vec::new(), Duration::ZERO)
            .unwrap_err()
            .code(),
        crescent_wire::ErrorCode::NotFound
    );
    assert!(io
        .poll(2, None, Vec::new(), Duration::ZERO)
        .unwrap()
        .is_empty());
}

/// The CI failure of session 7: a poll of the previous incarnation, still waiting when the
/// owner restarted, was woken by the new incarnation's first item and took it (its HTTP
/// reply went to a dead connection), so the reconciliation waiting for that item held the
/// device's ledger (and `cold ls` with it) for the whole item timeout.
#[test]
fn a_superseded_poll_takes_no_work_of_the_new_incarnation() {
    let mut m = Mailbox {
        incarnation: Some(2),
        ..Mailbox::default()
    };
    m.queued.push_back(OwnerIoItem {
        id: 1,
        work: OwnerIoWork::Scan,
    });
    assert_eq!(m.answer_poll(1, false), Some(Vec::new()));
    assert_eq!(m.queued.len(), 1, "the item stays for incarnation 2");
    let items = m.answer_poll(2, false).expect("incarnation 2 takes it");
    assert_eq!(items.len(), 1);
    // Nothing queued: the current incarnation keeps waiting until its deadline.
    assert_eq!(m.answer_poll(2, false), None);
    assert_eq!(m.answer_poll(2, true), Some(Vec::new()));
}

/// The owner answers every item it took on its next poll; an item that poll does not answer
/// was lost with the previous reply (a dropped connection) and is offered again, first.
#[test]
fn an_item_whose_poll_reply_was_lost_is_offered_again() {
    let io = Arc::new(owner_io());
    io.connect(3);
    let caller = {
        let io = io.clone();
        std::thread::spawn(move || io.delete("objects/aa/x.cold"))
    };
    let lost = io.poll(3, None, Vec::new(), WAIT).unwrap();
    assert_eq!(lost.len(), 1);
    // The next poll carries no result for it: the reply never reached the owner.
    let again = io.poll(3, None, Vec::new(), WAIT).unwrap();
    assert_eq!(again, lost, "the lost item is offered again");
    let results = vec![(again[0].id, OwnerIoOutcome::Deleted { existed: true })];
    assert!(io
        .poll(3, None, results, Duration::ZERO)
        .unwrap()
        .is_empty());
    assert_eq!(caller.join().unwrap(), Ok(true));
    assert_eq!(
        io.counter
            .with_label_values(&["delete", "redelivered"])
            .get(),
        1
    );
}

#[test]
fn a_failed_owner_probe_fails_the_device_probe() {
    let io = owner_io();
    io.connect(1);
    io.poll(1, Some("disk full".into()), Vec::new(), Duration::ZERO)
        .unwrap();
    let err = io.probe().unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
    io.poll(1, None, Vec::new(), Duration::ZERO).unwrap();
    assert!(io.probe().is_ok());
}

#[test]
fn unanswered_device_changes_are_flagged_for_the_owners_return() {
    let io = Arc::new(owner_io());
    // A read that fails changes nothing on the device: nothing to resume.
    assert!(io.read("objects/aa/x.cold", 1, 0).is_err());
    assert!(!io.take_missed_work());
    // A delete the owner could not be asked for must be resumed once it is back.
    assert!(io.delete("objects/aa/x.cold").is_err());
    assert!(io.take_missed_work());
    assert!(!io.take_missed_work(), "taking clears it");
    // A registration reconciles the device, which resumes it: the flag is cleared.
    assert!(io.delete("objects/aa/x.cold").is_err());
    io.connect(3);
    assert!(!io.take_missed_work());
    // An answered call sets nothing.
    let caller = {
        let io = io.clone();
        std::thread::spawn(move || io.delete("objects/aa/x.cold"))
    };
    serve_once(&io, 3, |_| OwnerIoOutcome::Deleted { existed: false });
    assert_eq!(caller.join().unwrap(), Ok(false));
    assert!(!io.take_missed_work());
}
