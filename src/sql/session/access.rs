//! Access checks: every statement of a session opened for a user is
//! checked against that user's grants before it runs (the rules are in
//! [`crate::access`]).
//!
//! - **Plans.** Every plan DataFusion makes for the session
//!   ([`Session::plan`], the row query of `DELETE` and `UPDATE`) is walked,
//!   subqueries and views included: each widesql table it scans (as a
//!   table, a versions view such as `cells(…)`, or the row source of
//!   `DELETE`/`UPDATE`) needs `SELECT`, the target of an `INSERT` needs
//!   `INSERT`. Plans in the plan cache are kept per user and are planned
//!   (and so checked) again after any grant changes, since grants move
//!   the catalog generation.
//! - **Statements widesql runs itself**: `CREATE TABLE` needs `CREATE` on
//!   the dataset, `CREATE SCHEMA` on the project, `ALTER` and `DROP` on
//!   the object itself (or what holds it); `CREATE DATABASE`, users and
//!   grants need an admin; `DELETE` and `UPDATE` need their privilege on
//!   the target, and `SELECT` for the rows they read.
//! - **Listings** (`SHOW`, `information_schema`, Flight SQL's catalog
//!   calls) hold only the objects the user has a privilege on, in or under.

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{LogicalPlan, TableSource, WriteOp};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, ObjectName, ObjectType, RenameTableNameKind, SchemaName, Set, Statement,
};

use crate::access::{AccessError, Privilege, Securable};
use crate::error::Result;
use crate::ids::TableId;
use crate::sql::read::table::WideTable;
use crate::sql::read::versions::CellsView;
use crate::sql::session::dispatch::select_into_target;
use crate::sql::Session;

impl Session {
    /// Refuses unless the session has no user or its user is an admin.
    pub(crate) fn require_admin(&self, action: &str) -> Result<()> {
        let Some(user) = &self.options.user else {
            return Ok(());
        };
        if self.db.catalog().read().is_admin(user)? {
            return Ok(());
        }
        Err(AccessError::AdminOnly {
            user: user.clone(),
            action: action.to_string(),
        }
        .into())
    }

    /// Refuses unless the session's user holds `privilege` on `on`.
    pub(crate) fn require(&self, privilege: Privilege, on: Securable) -> Result<()> {
        let Some(user) = &self.options.user else {
            return Ok(());
        };
        let state = self.db.catalog().read();
        if state.allows(user, privilege, on)? {
            return Ok(());
        }
        Err(AccessError::Denied {
            user: user.clone(),
            privilege,
            object: state.securable_name(on),
        }
        .into())
    }

    /// Whether the session lists `on` (always, without a user).
    pub(crate) fn sees(&self, on: Securable) -> bool {
        self.db
            .catalog()
            .read()
            .sees(self.options.user.as_deref(), on)
    }

    /// Refuses a plan that reads or writes a widesql table its user may
    /// not; also when the user was dropped.
    pub(crate) fn check_plan(&self, plan: &LogicalPlan) -> Result<()> {
        if self.options.user.is_none() {
            return Ok(());
        }
        let mut needs = Vec::new();
        tables_used(plan, &mut needs)?;
        if needs.is_empty() {
            // A plan that reads no table still runs for a known user only.
            return self.require_user();
        }
        for (privilege, table) in needs {
            self.require(privilege, Securable::Table(table))?;
        }
        Ok(())
    }

    /// Refuses when the session's user was dropped.
    fn require_user(&self) -> Result<()> {
        if let Some(user) = &self.options.user {
            self.db.catalog().read().is_admin(user)?;
        }
        Ok(())
    }

    /// Checks a statement widesql runs itself (DDL, `SHOW`, `DESCRIBE`)
    /// against the session's user. Objects that do not exist are not
    /// checked here: the statement reports them missing.
    pub(crate) fn check_statement(&self, statement: &DfStatement) -> Result<()> {
        if self.options.user.is_none() {
            return Ok(());
        }
        self.require_user()?;
        let DfStatement::Statement(inner) = statement else {
            return Ok(());
        };
        match inner.as_ref() {
            Statement::CreateDatabase { .. } => self.require_admin("create projects"),
            Statement::CreateSchema {
                schema_name: SchemaName::Simple(name),
                ..
            } => match self.resolve_dataset_name(name) {
                Ok((project, _)) => self.require_in_project(&project),
                Err(_) => Ok(()),
            },
            Statement::CreateTable(create) => self.require_in_dataset(&create.name),
            Statement::Query(query) => match select_into_target(query) {
                Some(name) => self.require_in_dataset(name),
                None => Ok(()),
            },
            Statement::AlterTable(alter) => {
                self.require_on_table(Privilege::Create, &alter.name)?;
                // A table renamed into another dataset lands there.
                alter.operations.iter().try_for_each(|op| match op {
                    AlterTableOperation::RenameTable { table_name } => {
                        let (RenameTableNameKind::To(to) | RenameTableNameKind::As(to)) =
                            table_name;
                        match self.name_parts(to)?.len() {
                            1 => Ok(()),
                            _ => self.require_in_dataset(to),
                        }
                    }
                    _ => Ok(()),
                })
            }
            // Renaming a dataset takes what dropping it does.
            Statement::AlterSchema(alter) => self.require_drop(ObjectType::Schema, &alter.name),
            Statement::Set(Set::SingleAssignment { variable, .. }) => {
                let name = variable.to_string().to_lowercase();
                if name.starts_with("datafusion.runtime.") || name.starts_with("distributed.") {
                    // Memory limits and spill directories are the host's;
                    // how a cluster splits queries is the cluster's.
                    return self.require_admin(&format!("set {name}"));
                }
                if name == "widesql.write_timestamp" {
                    // Timestamps chosen by the writer can make a value win
                    // over every later one, or rewrite what `as_of` shows.
                    return self.require_admin("choose write timestamps");
                }
                Ok(())
            }
            Statement::Drop {
                object_type, names, ..
            } => names
                .iter()
                .try_for_each(|name| self.require_drop(*object_type, name)),
            Statement::ShowColumns { show_options, .. } => match &show_options.show_in {
                Some(shown) => match &shown.parent_name {
                    Some(name) => self.require_on_table(Privilege::Select, name),
                    None => Ok(()),
                },
                None => Ok(()),
            },
            Statement::ExplainTable { table_name, .. } => {
                self.require_on_table(Privilege::Select, table_name)
            }
            _ => Ok(()),
        }
    }

    /// `privilege` on the table `name`, when it is a widesql table.
    pub(crate) fn require_on_table(&self, privilege: Privilege, name: &ObjectName) -> Result<()> {
        match self.open_table(name) {
            Ok(table) => self.require(privilege, Securable::Table(table.id())),
            Err(_) => Ok(()),
        }
    }

    /// `CREATE` on the dataset a new table `name` goes into.
    fn require_in_dataset(&self, name: &ObjectName) -> Result<()> {
        let Ok((project, dataset, _)) = self.resolve_table_name(name) else {
            return Ok(());
        };
        match self
            .db
            .open_project(&project)
            .and_then(|p| p.open_dataset(&dataset))
        {
            Ok(dataset) => self.require(Privilege::Create, Securable::Dataset(dataset.id())),
            Err(_) => Ok(()),
        }
    }

    /// `CREATE` on the project `name`.
    pub(crate) fn require_in_project(&self, name: &str) -> Result<()> {
        match self.db.open_project(name) {
            Ok(project) => self.require(Privilege::Create, Securable::Project(project.id())),
            Err(_) => Ok(()),
        }
    }

    /// `CREATE` on the object a `DROP` names (views and indexes are not
    /// widesql objects).
    fn require_drop(&self, kind: ObjectType, name: &ObjectName) -> Result<()> {
        match kind {
            ObjectType::Table => self.require_on_table(Privilege::Create, name),
            ObjectType::Schema => match self.resolve_dataset_name(name) {
                Ok((project, dataset)) => match self
                    .db
                    .open_project(&project)
                    .and_then(|p| p.open_dataset(&dataset))
                {
                    Ok(d) => self.require(Privilege::Create, Securable::Dataset(d.id())),
                    Err(_) => Ok(()),
                },
                Err(_) => Ok(()),
            },
            ObjectType::Database => match self.name_parts(name) {
                Ok(parts) => self.require_in_project(&parts.join(".")),
                Err(_) => Ok(()),
            },
            _ => Ok(()),
        }
    }
}

/// The widesql table a plan's table source reads, if it is one.
fn widesql_table(source: &std::sync::Arc<dyn TableSource>) -> Option<TableId> {
    let provider = source_as_provider(source).ok()?;
    if let Some(table) = provider.downcast_ref::<WideTable>() {
        return Some(table.store().layout.id);
    }
    provider
        .downcast_ref::<CellsView>()
        .map(|view| view.table().store().layout.id)
}

/// Adds to `needs` the privilege each widesql table of `plan` needs: its
/// nodes, the subqueries of its expressions, and the plans of its views.
fn tables_used(plan: &LogicalPlan, needs: &mut Vec<(Privilege, TableId)>) -> Result<()> {
    let mut views = Vec::new();
    plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::TableScan(scan) => match widesql_table(&scan.source) {
                Some(id) => needs.push((Privilege::Select, id)),
                None => {
                    if let Some(view) = scan.source.get_logical_plan() {
                        views.push(view.into_owned());
                    }
                }
            },
            LogicalPlan::Dml(dml) => {
                let privilege = match dml.op {
                    WriteOp::Insert(_) | WriteOp::Ctas => Privilege::Insert,
                    WriteOp::Update => Privilege::Update,
                    WriteOp::Delete => Privilege::Delete,
                    WriteOp::Truncate => Privilege::Delete,
                    // A kind of write added later: the strictest check.
                    _ => Privilege::Create,
                };
                if let Some(id) = widesql_table(&dml.target) {
                    needs.push((privilege, id));
                }
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    for view in views {
        tables_used(&view, needs)?;
    }
    Ok(())
}
