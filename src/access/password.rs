//! Password hashes: Argon2id with its default cost, stored as PHC strings
//! (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`), so that the cost can
//! rise later without making older hashes unreadable.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use super::AccessError;

/// The longest password accepted, in bytes.
const MAX_PASSWORD_LEN: usize = 1024;

/// The PHC string of `password` with a new random salt.
pub(crate) fn hash_password(password: &str) -> Result<String, AccessError> {
    if password.is_empty() {
        return Err(AccessError::InvalidPassword(
            "a password must not be empty".into(),
        ));
    }
    if password.len() > MAX_PASSWORD_LEN {
        return Err(AccessError::InvalidPassword(format!(
            "a password is at most {MAX_PASSWORD_LEN} bytes"
        )));
    }
    // 16 random bytes (a v4 UUID's random bits come from the system).
    let salt = SaltString::encode_b64(uuid::Uuid::new_v4().as_bytes())
        .map_err(|e| AccessError::InvalidPassword(format!("cannot make a salt: {e}")))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| AccessError::InvalidPassword(e.to_string()))
}

/// Whether `password` is the one `hash` was made from. A hash that does not
/// parse matches no password.
pub(crate) fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_matches_its_password_only() -> Result<(), AccessError> {
        let hash = hash_password("s3cret")?;
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify_password("s3cret", &hash));
        assert!(!verify_password("s3cret ", &hash));
        assert!(!verify_password("s3cret", "not a hash"));
        // A new salt each time.
        assert_ne!(hash, hash_password("s3cret")?);
        assert!(hash_password("").is_err());
        Ok(())
    }
}
