//! Keystone facts the cluster publishes: the token's project scope and the
//! raw catalog URLs (not version-discovered ones) for the configured region
//! and interface.

use std::future::Future;
use std::sync::Arc;

use crate::error::OsError;
use crate::session::{catalog_url, Session, TokenProject};

/// What the credentials resolve to.
pub trait Identity: Send + Sync {
    /// `token.project` (absent for unscoped tokens).
    fn project(&self) -> impl Future<Output = Result<Option<TokenProject>, OsError>> + Send;
    /// The catalog URL of the first of `types` present, if any.
    fn catalog_endpoint(
        &self,
        types: &[&str],
    ) -> impl Future<Output = Result<Option<String>, OsError>> + Send;
}

/// The real Keystone client.
#[derive(Clone, Debug)]
pub struct Keystone {
    session: Arc<Session>,
}

impl Keystone {
    /// A Keystone client on `session`, sharing its token with the other services.
    pub fn new(session: Arc<Session>) -> Self {
        Self { session }
    }
}

impl Identity for Keystone {
    async fn project(&self) -> Result<Option<TokenProject>, OsError> {
        Ok(self.session.token().await?.project.clone())
    }

    async fn catalog_endpoint(&self, types: &[&str]) -> Result<Option<String>, OsError> {
        let token = self.session.token().await?;
        let config = self.session.config();
        Ok(catalog_url(
            &token.catalog,
            types,
            config.region.as_deref(),
            &config.interface,
        ))
    }
}
