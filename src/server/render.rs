//! `GET /v1/render/{format}/{service}`: the service's resolved policy in a
//! mesh's or gRPC's retry dialect, from the policy being served.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use stormguard_core::policy::check_service_name;

use super::{ApiError, AppState};
use stormguard_toolkit::render::{render, Format, Rendering, Target};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenderQuery {
    namespace: Option<String>,
}

/// 200 with the rendering and what it lost; 400 for an unknown dialect or a
/// bad service or namespace name.
pub async fn one(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<RenderQuery>, QueryRejection>,
) -> Result<Json<Rendering>, ApiError> {
    let Query(query) = query?;
    let Path((format, service)) = path.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let format = Format::named(&format).ok_or_else(|| {
        let names: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("unknown format {format:?}; expected one of {}", names.join(", ")),
        )
    })?;
    check_service_name(&service).map_err(|problem| ApiError::new(StatusCode::BAD_REQUEST, problem))?;
    let namespace = query.namespace.unwrap_or_else(|| "default".into());
    check_service_name(&namespace)
        .map_err(|problem| ApiError::new(StatusCode::BAD_REQUEST, format!("namespace: {problem}")))?;
    let policy = state.store.current().document.resolve(&service).policy;
    let target = Target {
        service: &service,
        namespace: &namespace,
    };
    Ok(Json(render(target, &policy, format)))
}
