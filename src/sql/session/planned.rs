//! A DataFrame over a physical plan made already.
//!
//! DataFusion's `DataFrame::collect` optimises and plans its logical plan
//! again, even when the statement behind it was planned a moment ago. A
//! query answered from the plan cache ([`crate::sql::session::front_door`]) is
//! returned as a DataFrame whose plan is one [`Planned`] node: the
//! session's query planner hands out its physical plan (its state reset,
//! so that it can run again), and `collect` only runs it. Operations added
//! to such a DataFrame (`filter`, `select`, …) run on top of that plan.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session as DfSession;
use datafusion::common::{DFSchemaRef, Result};
use datafusion::dataframe::DataFrame;
use datafusion::execution::context::{QueryPlanner, SessionState};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};

/// A logical node that stands for a physical plan made already.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    physical: Arc<dyn ExecutionPlan>,
    schema: DFSchemaRef,
}

impl Planned {
    /// The physical plan, ready to run once more.
    fn physical(&self) -> Result<Arc<dyn ExecutionPlan>> {
        reset_plan_states(Arc::clone(&self.physical))
    }
}

impl PartialEq for Planned {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.physical, &other.physical)
    }
}

impl Eq for Planned {}

impl PartialOrd for Planned {
    fn partial_cmp(&self, _: &Self) -> Option<Ordering> {
        None
    }
}

impl Hash for Planned {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.physical) as *const () as usize).hash(state)
    }
}

impl UserDefinedLogicalNodeCore for Planned {
    fn name(&self) -> &str {
        "Planned"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        Vec::new()
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Planned: {}", self.physical.name())
    }

    fn with_exprs_and_inputs(&self, _: Vec<Expr>, _: Vec<LogicalPlan>) -> Result<Self> {
        Ok(self.clone())
    }
}

/// A DataFrame of `state` whose plan is `physical` (its logical schema
/// `schema`).
pub(crate) fn frame(
    state: SessionState,
    physical: Arc<dyn ExecutionPlan>,
    schema: DFSchemaRef,
) -> DataFrame {
    let node = Planned { physical, schema };
    DataFrame::new(
        state,
        LogicalPlan::Extension(Extension {
            node: Arc::new(node),
        }),
    )
}

/// The session's query planner: a plan that is one [`Planned`] node is its
/// physical plan; anything else is DataFusion's, with [`Planned`] nodes
/// under it planned as their physical plans.
#[derive(Debug, Default)]
pub(crate) struct WideQueryPlanner;

#[async_trait]
impl QueryPlanner for WideQueryPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        session: &dyn DfSession,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(planned) = as_planned(plan) {
            return planned.physical();
        }
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(PlannedPlanner)])
            .create_physical_plan(plan, session)
            .await
    }
}

fn as_planned(plan: &LogicalPlan) -> Option<&Planned> {
    match plan {
        LogicalPlan::Extension(extension) => extension.node.as_any().downcast_ref::<Planned>(),
        _ => None,
    }
}

/// Plans a [`Planned`] node under other operators.
struct PlannedPlanner;

#[async_trait]
impl ExtensionPlanner for PlannedPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        _physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn DfSession,
        _planning: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        node.as_any()
            .downcast_ref::<Planned>()
            .map(Planned::physical)
            .transpose()
    }
}

/// `builder` with the query planner that knows [`Planned`] nodes.
pub(crate) fn with_planner(builder: SessionStateBuilder) -> SessionStateBuilder {
    builder.with_query_planner(Arc::new(WideQueryPlanner))
}
