//! The account a wrapped command runs as: who invoked `sudo gpuprofd … -- COMMAND` (or whom
//! `--user` names), with the uid, primary gid, supplementary groups, home and name that a login
//! as that user would give, read from the system's user database in the daemon (the child, forked
//! from a threaded process, may only make async-signal-safe calls: it gets the numbers ready).

use std::ffi::{CStr, CString};

/// Whom to run the command as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary gid among them), as `initgroups` would set them.
    pub groups: Vec<u32>,
    /// The login name, where the user database has one.
    pub name: Option<String>,
    pub home: Option<String>,
}

/// Why no account could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("--user \"{0}\": no such user (not a name in the user database, nor a number)")]
    NoSuchUser(String),
    #[error("SUDO_UID=\"{0}\" or SUDO_GID=\"{1}\" is not a number: cannot tell who ran sudo")]
    BadSudo(String, String),
}

/// The password-file entry's fields gpuprofd uses.
struct Pw {
    uid: u32,
    gid: u32,
    name: String,
    home: String,
}

fn pw_lookup(by: Result<&CStr, u32>) -> Option<Pw> {
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: an all-zero passwd is a valid value for the out-parameter.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: the buffer and out-pointers are valid for the call; the strings it fills point into
    // `buf`, which outlives their use below.
    let rc = unsafe {
        match by {
            Ok(name) => libc::getpwnam_r(
                name.as_ptr(),
                &mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut out,
            ),
            Err(uid) => {
                libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out)
            }
        }
    };
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: on success the fields are NUL-terminated strings inside `buf`.
    let text = |p: *const libc::c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    Some(Pw {
        uid: pw.pw_uid,
        gid: pw.pw_gid,
        name: text(pw.pw_name),
        home: text(pw.pw_dir),
    })
}

/// The groups `initgroups(name, gid)` would give: `gid` and every group that lists `name`.
fn group_list(name: &str, gid: u32) -> Vec<u32> {
    let Ok(cname) = CString::new(name) else {
        return vec![gid];
    };
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let asked = n;
        // SAFETY: `groups` holds `n` entries; the call writes at most that many and says how
        // many it needs when they do not fit.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n as usize);
            return groups;
        }
        if n <= asked {
            // No growth asked for: give up on the supplementary groups.
            return vec![gid];
        }
    }
}

impl Account {
    fn of(pw: Pw, gid: u32) -> Account {
        Account {
            uid: pw.uid,
            gid,
            groups: group_list(&pw.name, gid),
            name: Some(pw.name),
            home: Some(pw.home),
        }
    }

    /// The user `--user` names: a login name, or a number (a uid the user database may not know:
    /// then its own gid as the only group).
    pub fn named(user: &str) -> Result<Account, AccountError> {
        let by_name = CString::new(user).ok().and_then(|c| pw_lookup(Ok(&c)));
        if let Some(pw) = by_name {
            let gid = pw.gid;
            return Ok(Account::of(pw, gid));
        }
        let uid: u32 = user
            .parse()
            .map_err(|_| AccountError::NoSuchUser(user.into()))?;
        Ok(match pw_lookup(Err(uid)) {
            Some(pw) => {
                let gid = pw.gid;
                Account::of(pw, gid)
            }
            None => Account {
                uid,
                gid: uid,
                groups: vec![uid],
                name: None,
                home: None,
            },
        })
    }

    /// Who ran `sudo` (`SUDO_UID`, `SUDO_GID`; the name from the user database, else
    /// `SUDO_USER`), when gpuprofd runs as root under sudo; `None` otherwise.
    pub fn sudo_invoker(
        euid: u32,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Account>, AccountError> {
        let (Some(u), Some(g)) = (var("SUDO_UID"), var("SUDO_GID")) else {
            return Ok(None);
        };
        if euid != 0 {
            return Ok(None);
        }
        let (Ok(uid), Ok(gid)) = (u.parse::<u32>(), g.parse::<u32>()) else {
            return Err(AccountError::BadSudo(u, g));
        };
        Ok(Some(match pw_lookup(Err(uid)) {
            Some(pw) => Account::of(pw, gid),
            None => Account {
                uid,
                gid,
                groups: vec![gid],
                name: var("SUDO_USER"),
                home: None,
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_by_name_and_number() {
        let by_name = Account::named("root").unwrap();
        assert_eq!((by_name.uid, by_name.gid), (0, 0));
        assert_eq!(by_name.name.as_deref(), Some("root"));
        assert_eq!(by_name.home.as_deref(), Some("/root"));
        assert!(by_name.groups.contains(&0));
        assert_eq!(Account::named("0").unwrap(), by_name);
    }

    #[test]
    fn unknown_names_and_numbers() {
        assert!(matches!(
            Account::named("no-such-user-gpuprofd"),
            Err(AccountError::NoSuchUser(_))
        ));
        let a = Account::named("4000123").unwrap();
        assert_eq!(
            (a.uid, a.gid, a.groups.clone()),
            (4000123, 4000123, vec![4000123])
        );
        assert_eq!((a.name, a.home), (None, None));
    }

    #[test]
    fn sudo_is_read_only_as_root() {
        let env = |k: &str| match k {
            "SUDO_UID" => Some("4000123".to_string()),
            "SUDO_GID" => Some("4000124".to_string()),
            "SUDO_USER" => Some("alice".to_string()),
            _ => None,
        };
        let a = Account::sudo_invoker(0, env).unwrap().unwrap();
        assert_eq!((a.uid, a.gid, a.groups), (4000123, 4000124, vec![4000124]));
        assert_eq!(a.name.as_deref(), Some("alice"));
        assert_eq!(Account::sudo_invoker(1000, env).unwrap(), None);
        assert_eq!(Account::sudo_invoker(0, |_| None).unwrap(), None);
        let bad = |k: &str| (k != "SUDO_USER").then(|| "x".to_string());
        assert!(matches!(
            Account::sudo_invoker(0, bad),
            Err(AccountError::BadSudo(_, _))
        ));
    }
}
