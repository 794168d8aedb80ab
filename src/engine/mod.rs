//! The patch engine: GeneratePatches, DiscoverVariables and ValidateTopology.
//!
//! The server only knows the [`PatchEngine`] trait; what a patch is lives behind it.
//! GeneratePatches is handed the raw body, so an engine that keeps answers
//! ([`cache`], [`fingerprint`]) recognises a resent request before decoding it.

use crate::sdk::decode::{decode_generate_patches, decode_generate_patches_raw, DecodeError};
use crate::sdk::topology::{
    DiscoverVariablesRequest, DiscoverVariablesResponse, GeneratePatchesRequest,
    GeneratePatchesResponse, ValidateTopologyRequest,
};
use crate::sdk::{response_kind, CapiVersion, CommonResponse, Hook, ResponseStatus, API_VERSION};
use cloud_checks::CloudPlan;

/// The topology-mutation handlers one engine serves, by handler name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineHandlers {
    pub generate_patches: Vec<String>,
    pub discover_variables: Vec<String>,
    pub validate_topology: Vec<String>,
}

/// A GeneratePatches answer and what the call's log line says about it.
#[derive(Debug, Clone)]
pub struct PatchAnswer {
    pub response: GeneratePatchesResponse,
    /// The log line's detail: the failure message, or how the answer was found.
    pub detail: String,
    /// `(namespace, name)` of the Cluster the request is for, when it says.
    pub cluster: Option<(String, String)>,
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
    /// Answers a GeneratePatches request body; an error is a body that is not a
    /// GeneratePatches request. The default decodes it and calls
    /// [`PatchEngine::generate_patches`].
    fn answer_generate_patches(
        &self,
        handler: &str,
        body: &[u8],
    ) -> Result<PatchAnswer, DecodeError> {
        let req = decode_generate_patches(body)?;
        let response = self.generate_patches(handler, &req);
        Ok(PatchAnswer {
            detail: response.message.clone(),
            cluster: req.cluster(),
            response,
        })
    }
    fn discover_variables(
        &self,
        handler: &str,
        req: &DiscoverVariablesRequest,
        capi: CapiVersion,
    ) -> DiscoverVariablesResponse;
    fn validate_topology(&self, handler: &str, req: &ValidateTopologyRequest) -> CommonResponse;
    /// The cloud lookups a ValidateTopology request needs once its variables are
    /// valid; `None` for a handler whose pack declares none (the default).
    fn cloud_plan(&self, _handler: &str, _req: &ValidateTopologyRequest) -> Option<CloudPlan> {
        None
    }
    /// What BeforeClusterCreate checks for a Cluster whose class validates with
    /// `handler`; `None` as for [`PatchEngine::cloud_plan`].
    fn creation_plan(
        &self,
        _handler: &str,
        _cluster: &clusterclass::Cluster,
    ) -> Option<cloud_checks::CreationPlan> {
        None
    }
    /// GeneratePatches answers from the answer cache and computed, `(hits, misses)`;
    /// `None` without a cache.
    fn patch_cache_stats(&self) -> Option<(u64, u64)> {
        None
    }
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

    /// Reads the body as [`PackEngine`] does, so both accept the same bodies.
    fn answer_generate_patches(&self, _: &str, body: &[u8]) -> Result<PatchAnswer, DecodeError> {
        let decoded = decode_generate_patches_raw(body)?;
        Ok(PatchAnswer {
            response: GeneratePatchesResponse::success(),
            detail: String::new(),
            cluster: decoded.cluster(),
        })
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

pub mod apply;
pub mod cache;
pub mod cloud_checks;
pub mod clusterclass;
pub mod discover;
pub mod fingerprint;
pub mod generate;
pub mod pack;
pub mod packs;
pub mod rules;
pub mod schema;
pub mod selector;
pub mod skeleton;
pub mod template;
pub mod validate;
pub mod variables;
pub mod yaml;

pub use packs::PackEngine;
