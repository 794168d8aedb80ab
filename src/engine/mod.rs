//! The patch engine: GeneratePatches, DiscoverVariables and ValidateTopology.
//!
//! The server only knows the [`PatchEngine`] trait; what a patch is lives behind it.

use crate::sdk::fingerprint::Fingerprint;
use crate::sdk::topology::{
    DiscoverVariablesRequest, DiscoverVariablesResponse, GeneratePatchesRequest,
    GeneratePatchesResponse, ValidateTopologyRequest,
};
use crate::sdk::{response_kind, CapiVersion, CommonResponse, Hook, ResponseStatus, API_VERSION};

/// The topology-mutation handlers one engine serves, by handler name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineHandlers {
    pub generate_patches: Vec<String>,
    pub discover_variables: Vec<String>,
    pub validate_topology: Vec<String>,
}

/// Answers the topology-mutation hooks. Implementations are pure CPU work, so the calls
/// are synchronous; the server never inspects what they return beyond `status`.
pub trait PatchEngine: Send + Sync + 'static {
    fn handlers(&self) -> EngineHandlers;
    fn generate_patches(
        &self,
        handler: &str,
        req: &GeneratePatchesRequest,
    ) -> GeneratePatchesResponse;
    /// An answer already computed for a request with this content, if the engine keeps
    /// any. The server asks before decoding a request in full; `uids[i]` belongs to the
    /// item fingerprinted `fp.items[i]`.
    fn remembered_patches(
        &self,
        _handler: &str,
        _fp: &Fingerprint,
        _uids: &[&str],
    ) -> Option<GeneratePatchesResponse> {
        None
    }
    /// Whether [`PatchEngine::remembered_patches`] can ever answer: if not, the server
    /// does not fingerprint requests.
    fn keeps_answers(&self) -> bool {
        false
    }
    /// [`PatchEngine::generate_patches`] for a request whose fingerprint the caller
    /// already has, so that an engine that stores answers need not compute it again.
    fn generate_patches_with(
        &self,
        handler: &str,
        req: &GeneratePatchesRequest,
        _fp: Option<Fingerprint>,
    ) -> GeneratePatchesResponse {
        self.generate_patches(handler, req)
    }
    fn discover_variables(
        &self,
        handler: &str,
        req: &DiscoverVariablesRequest,
        capi: CapiVersion,
    ) -> DiscoverVariablesResponse;
    fn validate_topology(&self, handler: &str, req: &ValidateTopologyRequest) -> CommonResponse;
}

/// An engine with no packs: nothing to patch, no variables, every topology valid.
/// That is a complete, correct answer for a ClusterClass that references no pack.
#[derive(Debug, Default, Clone)]
pub struct EmptyEngine;

impl PatchEngine for EmptyEngine {
    fn handlers(&self) -> EngineHandlers {
        EngineHandlers {
            generate_patches: vec![Hook::GeneratePatches.default_handler_name()],
            discover_variables: vec![Hook::DiscoverVariables.default_handler_name()],
            validate_topology: vec![Hook::ValidateTopology.default_handler_name()],
        }
    }

    fn generate_patches(&self, _: &str, _: &GeneratePatchesRequest) -> GeneratePatchesResponse {
        GeneratePatchesResponse::success()
    }

    fn discover_variables(
        &self,
        _: &str,
        _: &DiscoverVariablesRequest,
        _: CapiVersion,
    ) -> DiscoverVariablesResponse {
        DiscoverVariablesResponse {
            api_version: API_VERSION.to_string(),
            kind: response_kind(Hook::DiscoverVariables),
            status: ResponseStatus::Success,
            message: String::new(),
            variables: vec![],
        }
    }

    fn validate_topology(&self, _: &str, _: &ValidateTopologyRequest) -> CommonResponse {
        CommonResponse::new(Hook::ValidateTopology, ResponseStatus::Success, "")
    }
}

pub mod cache;
pub mod clusterclass;
pub mod discover;
pub mod generate;
pub mod pack;
pub mod packs;
pub mod rules;
pub mod schema;
pub mod selector;
pub mod template;
pub mod validate;
pub mod variables;
pub mod yaml;

pub use packs::PackEngine;
