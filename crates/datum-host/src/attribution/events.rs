//! The bytes fanotify hands over, parsed without `unsafe`: each event's
//! metadata (`struct fanotify_event_metadata`) and, with
//! `FAN_REPORT_DFID_NAME`, the name record that says which entry of the
//! marked directory it concerns.

/// `FANOTIFY_METADATA_VERSION` of the kernel interface this parser reads.
const METADATA_VERSION: u8 = 3;
const METADATA_LEN: usize = 24;
const INFO_TYPE_DFID_NAME: u8 = 2;

pub(super) const FAN_MODIFY: u64 = 0x0000_0002;
pub(super) const FAN_ATTRIB: u64 = 0x0000_0004;
pub(super) const FAN_MOVED_TO: u64 = 0x0000_0080;
pub(super) const FAN_CREATE: u64 = 0x0000_0100;
pub(super) const FAN_DELETE: u64 = 0x0000_0200;
pub(super) const FAN_Q_OVERFLOW: u64 = 0x0000_4000;
pub(super) const FAN_ONDIR: u64 = 0x4000_0000;

/// One event as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawEvent {
    pub mask: u64,
    /// The writer's pid (0 or negative: none, e.g. an overflow).
    pub pid: i32,
    /// The entry of the marked directory (`None`: the directory itself, or
    /// no name record).
    pub name: Option<String>,
}

impl RawEvent {
    /// The word a report uses for what happened.
    pub fn word(&self) -> &'static str {
        if self.mask & FAN_DELETE != 0 {
            "deleted"
        } else if self.mask & FAN_MOVED_TO != 0 {
            "moved into place"
        } else if self.mask & FAN_CREATE != 0 {
            "created"
        } else if self.mask & FAN_MODIFY != 0 {
            "modified"
        } else if self.mask & FAN_ATTRIB != 0 {
            "attributes changed"
        } else {
            "changed"
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Every whole event in `buf` (what one `read` returned). A record that does
/// not parse ends the batch (the kernel never splits an event over reads).
pub(super) fn parse(buf: &[u8]) -> Vec<RawEvent> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(event) = buf.get(at..) {
        let Some(len) = u32_at(event, 0).map(|l| l as usize) else {
            break;
        };
        if len < METADATA_LEN || len > event.len() || event.get(4) != Some(&METADATA_VERSION) {
            break;
        }
        let event = &event[..len];
        let (Some(meta_len), Some(mask), Some(pid)) =
            (u16_at(event, 6), u64_at(event, 8), i32_at(event, 20))
        else {
            break;
        };
        out.push(RawEvent {
            mask,
            pid,
            name: name_record(event.get(meta_len as usize..).unwrap_or_default()),
        });
        at += len;
    }
    out
}

/// The name of the `FAN_EVENT_INFO_TYPE_DFID_NAME` record among an event's
/// info records (`"."` means the directory itself: `None`).
fn name_record(mut info: &[u8]) -> Option<String> {
    while info.len() >= 4 {
        let kind = info[0];
        let len = u16_at(info, 2)? as usize;
        if len < 4 || len > info.len() {
            return None;
        }
        if kind == INFO_TYPE_DFID_NAME {
            // header (4), fsid (8), handle_bytes (4), handle_type (4), handle.
            let handle_bytes = u32_at(info, 12)? as usize;
            let name = info.get(20 + handle_bytes..len)?;
            let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
            let name = String::from_utf8_lossy(&name[..end]).into_owned();
            return (name != "." && !name.is_empty()).then_some(name);
        }
        info = &info[len..];
    }
    None
}

#[cfg(test)]
pub(super) fn encode(mask: u64, pid: i32, name: &str) -> Vec<u8> {
    let handle = [7u8; 8];
    let mut info = vec![INFO_TYPE_DFID_NAME, 0, 0, 0];
    info.extend_from_slice(&[1u8; 8]);
    info.extend_from_slice(&(handle.len() as u32).to_ne_bytes());
    info.extend_from_slice(&1i32.to_ne_bytes());
    info.extend_from_slice(&handle);
    info.extend_from_slice(name.as_bytes());
    info.push(0);
    while info.len() % 4 != 0 {
        info.push(0);
    }
    let info_len = info.len() as u16;
    info[2..4].copy_from_slice(&info_len.to_ne_bytes());
    let mut out = Vec::new();
    out.extend_from_slice(&((METADATA_LEN + info.len()) as u32).to_ne_bytes());
    out.push(METADATA_VERSION);
    out.push(0);
    out.extend_from_slice(&(METADATA_LEN as u16).to_ne_bytes());
    out.extend_from_slice(&mask.to_ne_bytes());
    out.extend_from_slice(&(-1i32).to_ne_bytes());
    out.extend_from_slice(&pid.to_ne_bytes());
    out.extend_from_slice(&info);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_with_name_records_parse_and_garbage_stops_the_batch() {
        let mut buf = encode(FAN_MODIFY, 42, "motd");
        buf.extend(encode(FAN_MOVED_TO, 43, "sshd_config"));
        buf.extend(encode(FAN_ATTRIB | FAN_ONDIR, 44, "."));
        buf.extend([9u8; 10]);
        let events = parse(&buf);
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].name.as_deref(), Some("motd"));
        assert_eq!((events[0].pid, events[0].word()), (42, "modified"));
        assert_eq!(events[1].word(), "moved into place");
        assert_eq!(events[2].name, None);
        assert!(parse(&buf[..buf.len() - 30]).len() <= 3);
        assert!(parse(&[]).is_empty());
    }
}
