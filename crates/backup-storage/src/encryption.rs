//! Client-side encryption of stored objects in the `age` format (age-encryption.org/v1) with
//! X25519 recipients. Writing needs only public keys (recipients), so whatever writes backups
//! cannot read them; reading needs an identity (private key). Objects are ordinary age files:
//! `age --decrypt` opens ours, and ours open files that `age` wrote.

use std::io::Write;
use std::sync::{Arc, Mutex};

use age::secrecy::ExposeSecret;
use age::x25519;
use serde::{Deserialize, Serialize};

/// Every age file starts with this line; nothing else we store does (bbolt, zstd, xbstream).
pub const AGE_MAGIC: &[u8] = b"age-encryption.org/v1\n";

#[derive(Debug, thiserror::Error)]
pub enum EncryptionError {
    #[error(
        "{source_name}, line {line}: not an age X25519 recipient (a public key starting with age1): {reason}"
    )]
    BadRecipient {
        source_name: String,
        line: usize,
        reason: String,
    },

    #[error("{source_name} holds no age recipient (one public key, age1..., per line)")]
    NoRecipients { source_name: String },

    // Never quotes the line: it may be a private key with a typo.
    #[error(
        "{source_name}, line {line}: not an age X25519 identity (a private key starting with AGE-SECRET-KEY-1, as age-keygen writes)"
    )]
    BadIdentity { source_name: String, line: usize },

    #[error(
        "{source_name} holds no age identity (AGE-SECRET-KEY-1..., as age-keygen writes; comments start with #)"
    )]
    NoIdentity { source_name: String },

    #[error(
        "{what} is encrypted (age) and no identity was given; pass the private key that matches one of its recipients{recipients}"
    )]
    IdentityNeeded { what: String, recipients: String },

    #[error(
        "{what} is encrypted to other keys: the identity given (public key {given}) is not among its recipients{recipients}"
    )]
    NotARecipient {
        what: String,
        given: String,
        recipients: String,
    },

    /// Without a manifest, age cannot tell a stanza for another key from a damaged one.
    #[error(
        "{what} does not open with the identity given (public key {given}): it is encrypted to other keys, or its header was damaged (no manifest records its recipients to tell which)"
    )]
    NoRecipientOpens { what: String, given: String },

    #[error("{what} is not a readable age file: {reason}")]
    BadHeader { what: String, reason: String },

    #[error(
        "{what} failed to decrypt: {reason} (the object was truncated or altered after it was written)"
    )]
    Corrupt { what: String, reason: String },

    #[error("encryption failed: {0}")]
    Encrypt(String),
}

impl EncryptionError {
    /// True when the stored data is at fault (exit code 3), not the keys or this machine.
    pub fn is_integrity(&self) -> bool {
        matches!(
            self,
            EncryptionError::BadHeader { .. } | EncryptionError::Corrupt { .. }
        )
    }

    /// True when the identity is at fault (exit code 4): none given for an encrypted object,
    /// a file that holds no usable age identity, or one that opens none of its stanzas. A
    /// restore tells this from bad data: the backup may be fine, the key is not.
    pub fn is_identity_problem(&self) -> bool {
        matches!(
            self,
            EncryptionError::BadIdentity { .. }
                | EncryptionError::NoIdentity { .. }
                | EncryptionError::IdentityNeeded { .. }
                | EncryptionError::NotARecipient { .. }
                | EncryptionError::NoRecipientOpens { .. }
        )
    }
}

type Result<T> = std::result::Result<T, EncryptionError>;

/// What a manifest records about an object's encryption: never a private key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Encryption {
    /// Always `age` (age-encryption.org/v1).
    pub scheme: String,
    /// The recipients' public keys (`age1...`), in the order given.
    pub recipients: Vec<String>,
}

impl Encryption {
    pub fn age(recipients: &Recipients) -> Encryption {
        Encryption {
            scheme: "age".into(),
            recipients: recipients.public_keys(),
        }
    }
}

/// Lines that are neither blank nor `#` comments, numbered from 1 (the age key-file convention).
fn key_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
}

/// Public keys to encrypt to. Several: key rotation, a break-glass key; any one decrypts.
#[derive(Clone)]
pub struct Recipients {
    keys: Vec<x25519::Recipient>,
}

impl std::fmt::Debug for Recipients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.public_keys()).finish()
    }
}

impl Recipients {
    /// Parses a recipients file (`age -R` format: one `age1...` per line, `#` comments).
    /// `source_name` names the file or Secret key in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Recipients> {
        let mut keys = Vec::new();
        for (line, key) in key_lines(text) {
            let recipient = key.parse::<x25519::Recipient>().map_err(|reason| {
                EncryptionError::BadRecipient {
                    source_name: source_name.to_string(),
                    line,
                    reason: reason.to_string(),
                }
            })?;
            keys.push(recipient);
        }
        if keys.is_empty() {
            return Err(EncryptionError::NoRecipients {
                source_name: source_name.to_string(),
            });
        }
        Ok(Recipients { keys })
    }

    /// Joins recipients from several sources (files, arguments) into one set.
    pub fn extend(&mut self, other: Recipients) {
        for key in other.keys {
            if !self.public_keys().contains(&key.to_string()) {
                self.keys.push(key);
            }
        }
    }

    pub fn public_keys(&self) -> Vec<String> {
        self.keys.iter().map(ToString::to_string).collect()
    }
}

/// Private keys to decrypt with. Debug never shows them.
pub struct Identity {
    keys: Vec<x25519::Identity>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Identity({})", self.public_keys().join(", "))
    }
}

impl Identity {
    /// Parses an identity file as `age-keygen` writes it (`AGE-SECRET-KEY-1...`, `#` comments).
    pub fn parse(text: &str, source_name: &str) -> Result<Identity> {
        let mut keys = Vec::new();
        for (line, key) in key_lines(text) {
            let identity =
                key.parse::<x25519::Identity>()
                    .map_err(|_| EncryptionError::BadIdentity {
                        source_name: source_name.to_string(),
                        line,
                    })?;
            keys.push(identity);
        }
        if keys.is_empty() {
            return Err(EncryptionError::NoIdentity {
                source_name: source_name.to_string(),
            });
        }
        Ok(Identity { keys })
    }

    /// A new random identity, written as `age-keygen` writes it (tests, examples).
    pub fn generate() -> (String, String) {
        let identity = x25519::Identity::generate();
        let public = identity.to_public().to_string();
        let secret = format!(
            "# public key: {public}\n{}\n",
            identity.to_string().expose_secret()
        );
        (secret, public)
    }

    /// The public keys of these identities.
    pub fn public_keys(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| k.to_public().to_string())
            .collect()
    }

    /// True when one of these identities is among `recipients` (public keys).
    pub fn matches_any(&self, recipients: &[String]) -> bool {
        self.public_keys().iter().any(|k| recipients.contains(k))
    }

    pub(crate) fn as_dyn(&self) -> impl Iterator<Item = &dyn age::Identity> {
        self.keys.iter().map(|k| k as &dyn age::Identity)
    }
}

/// A `Write` whose bytes the encryptor's caller takes out after each call.
#[derive(Clone, Default)]
struct Taken(Arc<Mutex<Vec<u8>>>);

impl Write for Taken {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Taken {
    fn take_into(&self, out: &mut Vec<u8>) {
        let mut buffer = self.0.lock().expect("not poisoned");
        out.clear();
        std::mem::swap(out, &mut buffer);
    }
}

/// Encrypts chunk by chunk; each call returns the bytes ready to store. age seals 64 KiB
/// chunks, so at most one chunk of plaintext waits here.
pub struct Encryptor {
    writer: age::stream::StreamWriter<Taken>,
    taken: Taken,
    out: Vec<u8>,
}

impl Encryptor {
    pub fn new(recipients: &Recipients) -> Result<Encryptor> {
        let encryptor = age::Encryptor::with_recipients(
            recipients.keys.iter().map(|k| k as &dyn age::Recipient),
        )
        .map_err(|e| EncryptionError::Encrypt(e.to_string()))?;
        let taken = Taken::default();
        let writer = encryptor
            .wrap_output(taken.clone())
            .map_err(|e| EncryptionError::Encrypt(e.to_string()))?;
        Ok(Encryptor {
            writer,
            taken,
            out: Vec::new(),
        })
    }

    /// Feeds `input`; returns output to store (the header first; possibly empty), borrowed
    /// until the next call.
    pub fn encrypt(&mut self, input: &[u8]) -> Result<&[u8]> {
        self.writer
            .write_all(input)
            .map_err(|e| EncryptionError::Encrypt(e.to_string()))?;
        self.taken.take_into(&mut self.out);
        Ok(&self.out)
    }

    /// Seals the last chunk; returns the last bytes to store.
    pub fn finish(self) -> Result<Vec<u8>> {
        self.writer
            .finish()
            .map_err(|e| EncryptionError::Encrypt(e.to_string()))?;
        let mut out = Vec::new();
        self.taken.take_into(&mut out);
        Ok(out)
    }
}

/// Why an age header did not open with `identity`, as the user should read it.
pub(crate) fn header_error(
    what: &str,
    error: age::DecryptError,
    identity: &Identity,
    recipients: Option<&[String]>,
) -> EncryptionError {
    match error {
        // The manifest names this identity's key among the recipients, so its stanza was
        // altered: age cannot tell a damaged stanza from one meant for another key.
        age::DecryptError::NoMatchingKeys
            if recipients.is_some_and(|keys| identity.matches_any(keys)) =>
        {
            EncryptionError::Corrupt {
                what: what.to_string(),
                reason: "the manifest lists the identity's key among the recipients, yet the header does not open with it".into(),
            }
        }
        age::DecryptError::NoMatchingKeys if recipients.is_none_or(<[String]>::is_empty) => {
            EncryptionError::NoRecipientOpens {
                what: what.to_string(),
                given: identity.public_keys().join(", "),
            }
        }
        age::DecryptError::NoMatchingKeys => EncryptionError::NotARecipient {
            what: what.to_string(),
            given: identity.public_keys().join(", "),
            recipients: recipients_note(recipients),
        },
        age::DecryptError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            EncryptionError::Corrupt {
                what: what.to_string(),
                reason: "the object ends inside the age header".into(),
            }
        }
        other => EncryptionError::BadHeader {
            what: what.to_string(),
            reason: other.to_string(),
        },
    }
}

/// ` (age1..., age1...)` from a manifest, for messages; empty when unknown.
pub(crate) fn recipients_note(recipients: Option<&[String]>) -> String {
    match recipients {
        Some(keys) if !keys.is_empty() => format!(" ({})", keys.join(", ")),
        _ => String::new(),
    }
}

/// Checks that `bytes` (the start of an object) hold a complete, well-formed age header,
/// without any key. `Ok(None)`: more bytes are needed.
pub(crate) fn check_header(what: &str, bytes: &[u8]) -> Result<Option<()>> {
    match age::Decryptor::new_buffered(bytes) {
        Ok(_) => Ok(Some(())),
        Err(age::DecryptError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(EncryptionError::BadHeader {
            what: what.to_string(),
            reason: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encrypt_all(data: &[u8], recipients: &Recipients, chunk: usize) -> Vec<u8> {
        let mut encryptor = Encryptor::new(recipients).unwrap();
        let mut stored = Vec::new();
        for c in data.chunks(chunk) {
            stored.extend_from_slice(encryptor.encrypt(c).unwrap());
        }
        stored.extend(encryptor.finish().unwrap());
        stored
    }

    fn decrypt_all(stored: &[u8], identity: &Identity) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let decryptor = age::Decryptor::new_buffered(stored).map_err(std::io::Error::other)?;
        let mut reader = decryptor
            .decrypt(identity.as_dyn())
            .map_err(std::io::Error::other)?;
        let mut out = Vec::new();
        reader.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn any_recipient_decrypts_and_nothing_else_does() {
        let (secret_a, public_a) = Identity::generate();
        let (secret_b, public_b) = Identity::generate();
        let (secret_c, _) = Identity::generate();
        let recipients = Recipients::parse(
            &format!("# rotation\n{public_a}\n\n  {public_b}  \n"),
            "recipients",
        )
        .unwrap();
        assert_eq!(recipients.public_keys(), vec![public_a, public_b]);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let stored = encrypt_all(&data, &recipients, 4096);
        assert!(stored.starts_with(AGE_MAGIC));
        for secret in [&secret_a, &secret_b] {
            let identity = Identity::parse(secret, "identity").unwrap();
            assert_eq!(decrypt_all(&stored, &identity).unwrap(), data);
        }
        let stranger = Identity::parse(&secret_c, "identity").unwrap();
        assert!(decrypt_all(&stored, &stranger).is_err());
        assert!(!stranger.matches_any(&recipients.public_keys()));
    }

    #[test]
    fn a_flipped_byte_anywhere_fails_decryption() {
        let (secret, public) = Identity::generate();
        let identity = Identity::parse(&secret, "identity").unwrap();
        let recipients = Recipients::parse(&public, "r").unwrap();
        let data = vec![9u8; 150_000];
        let stored = encrypt_all(&data, &recipients, 70_000);
        for at in [30, stored.len() / 2, stored.len() - 1] {
            let mut bad = stored.clone();
            bad[at] ^= 1;
            assert!(decrypt_all(&bad, &identity).is_err(), "byte {at}");
        }
        assert!(decrypt_all(&stored[..stored.len() - 10], &identity).is_err());
    }

    #[test]
    fn bad_keys_are_named_without_quoting_secrets() {
        let err = Recipients::parse("age1nope\n", "recipients.txt").unwrap_err();
        assert!(err.to_string().contains("recipients.txt, line 1"), "{err}");
        let err = Recipients::parse("# only a comment\n", "r").unwrap_err();
        assert!(matches!(err, EncryptionError::NoRecipients { .. }), "{err}");
        let typo = "AGE-SECRET-KEY-1TYPOTYPOTYPO";
        let err = Identity::parse(&format!("# c\n{typo}\n"), "id.txt").unwrap_err();
        assert!(err.to_string().contains("id.txt, line 2"), "{err}");
        assert!(!err.to_string().contains(typo), "{err}");
        let err = Identity::parse("", "id.txt").unwrap_err();
        assert!(matches!(err, EncryptionError::NoIdentity { .. }), "{err}");
        let (secret, _) = Identity::generate();
        let identity = Identity::parse(&secret, "id").unwrap();
        assert!(!format!("{identity:?}").contains("AGE-SECRET-KEY"));
    }

    #[test]
    fn headers_are_checked_without_a_key() {
        let (_, public) = Identity::generate();
        let stored = encrypt_all(b"x", &Recipients::parse(&public, "r").unwrap(), 1);
        assert!(check_header("o", &stored).unwrap().is_some());
        assert!(check_header("o", &stored[..40]).unwrap().is_none());
        let mut bad = stored.clone();
        bad[AGE_MAGIC.len() + 2] = b'!';
        assert!(check_header("o", &bad).is_err());
    }
}
