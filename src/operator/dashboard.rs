//! The read-only dashboard at `/dashboard` on the metrics port: the [`Inventory`] (bundles with
//! their source, stage and timeline, pools, instances, leases) and the live actor tree, root →
//! supervisors → per-object actors → stage children. One HTML page, no script, at the time of
//! the request.
//!
//! [`render`] is pure; [`page`] reads the caches and the actor registry.

use std::collections::HashMap;
use std::fmt::Write as _;

use kube::ResourceExt;
use ractor::ActorCell;

use super::inventory::{BundleRow, InstanceRow, Inventory, LeaseRow, PoolRow};
use crate::actors::Context;
use crate::api::bundle::CRCBundle;
use crate::api::instance::ClusterInstance;
use crate::api::lease::ClusterLease;
use crate::api::pool::ClusterPool;

/// Everything the page shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub inventory: Inventory,
    /// The supervision tree from its root; `None` on a standby replica.
    pub actors: Option<ActorNode>,
}

/// An actor and the actors it supervises.
#[derive(Clone, Debug, PartialEq)]
pub struct ActorNode {
    /// The registered name (`root`, `supervisor/<kind>`, `<kind>/<uid>`).
    pub name: String,
    /// The object an actor named after a UID serves (`namespace/name`), when it is cached.
    pub object: Option<String>,
    pub children: Vec<ActorNode>,
}

/// The page for the operator's current state.
pub fn page(ctx: &Context) -> String {
    let objects = ObjectNames::of(ctx);
    render(&Snapshot {
        inventory: Inventory::read(ctx),
        actors: ractor::registry::where_is("root").map(|root| actor_node(&root, &objects)),
    })
}

/// UID → `namespace/name` of every cached object.
struct ObjectNames(HashMap<String, String>);

impl ObjectNames {
    fn of(ctx: &Context) -> Self {
        let mut names = HashMap::new();
        let mut add = |uid: Option<String>, namespace: Option<String>, name: String| {
            if let Some(uid) = uid {
                let key = namespace.map_or(name.clone(), |ns| format!("{ns}/{name}"));
                names.insert(uid, key);
            }
        };
        for o in ctx.caches.objects::<CRCBundle>() {
            add(o.uid(), o.namespace(), o.name_any());
        }
        for o in ctx.caches.objects::<ClusterPool>() {
            add(o.uid(), o.namespace(), o.name_any());
        }
        for o in ctx.caches.objects::<ClusterInstance>() {
            add(o.uid(), o.namespace(), o.name_any());
        }
        for o in ctx.caches.objects::<ClusterLease>() {
            add(o.uid(), o.namespace(), o.name_any());
        }
        Self(names)
    }
}

fn actor_node(cell: &ActorCell, objects: &ObjectNames) -> ActorNode {
    let name = cell
        .get_name()
        .unwrap_or_else(|| format!("actor {}", cell.get_id()));
    let object = name
        .split_once('/')
        .and_then(|(_, uid)| objects.0.get(uid).cloned());
    let mut children: Vec<ActorNode> = cell
        .get_children()
        .iter()
        .map(|child| actor_node(child, objects))
        .collect();
    children.sort_by(|a, b| a.name.cmp(&b.name));
    ActorNode {
        name,
        object,
        children,
    }
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin-bottom:1.5em}\
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}\
th{background:#f0f0f0}.True{color:#176f2c}.False{color:#a31515}.Unknown{color:#8a6d00}\
ol.timeline{margin:0;padding-left:1.2em}ul.tree{list-style:none;padding-left:1.2em}\
ul.tree li:before{content:'\\2514\\2500 ';color:#999}.object{color:#555}";

/// The page. Every value from an object is escaped.
pub fn render(snapshot: &Snapshot) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>guestcluster</title><style>{STYLE}</style></head><body>\
         <h1>guestcluster</h1><p>Read-only; reload for the current state.</p>"
    );
    render_bundles(&mut html, &snapshot.inventory.bundles);
    render_pools(&mut html, &snapshot.inventory.pools);
    render_instances(&mut html, &snapshot.inventory.instances);
    render_leases(&mut html, &snapshot.inventory.leases);
    html.push_str("<h2>Actors</h2>");
    match &snapshot.actors {
        Some(root) => {
            html.push_str("<ul class=\"tree\" id=\"actors\">");
            render_actor(&mut html, root);
            html.push_str("</ul>");
        }
        None => {
            html.push_str("<p id=\"actors\">No supervision tree: this replica is on standby.</p>")
        }
    }
    html.push_str("</body></html>");
    html
}

fn table(html: &mut String, id: &str, title: &str, headers: &[&str], rows: Vec<Vec<String>>) {
    let _ = write!(html, "<h2>{title}</h2>");
    if rows.is_empty() {
        let _ = write!(html, "<p id=\"{id}\">None.</p>");
        return;
    }
    let _ = write!(html, "<table id=\"{id}\"><tr>");
    for h in headers {
        let _ = write!(html, "<th>{h}</th>");
    }
    html.push_str("</tr>");
    for row in rows {
        html.push_str("<tr>");
        for cell in row {
            // Cells arrive escaped (some hold markup of their own).
            let _ = write!(html, "<td>{cell}</td>");
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
}

fn render_bundles(html: &mut String, bundles: &[BundleRow]) {
    let rows = bundles
        .iter()
        .map(|b| {
            let mut steps = String::from("<ol class=\"timeline\">");
            for s in &b.timeline {
                let after = s
                    .after_seconds
                    .map(|secs| format!(" (+{secs}s)"))
                    .unwrap_or_default();
                let _ = write!(
                    steps,
                    "<li><span class=\"{status}\">{type_}={status}</span> {reason} at {at}{after}</li>",
                    status = escape(&s.status),
                    type_ = escape(&s.type_),
                    reason = escape(&s.reason),
                    at = escape(&s.at),
                );
            }
            steps.push_str("</ol>");
            vec![
                escape(&b.name),
                escape(&b.source),
                escape(&b.phase),
                escape(&b.stage),
                steps,
            ]
        })
        .collect();
    table(
        html,
        "bundles",
        "CRCBundles",
        &["name", "source", "phase", "stage", "timeline"],
        rows,
    );
}

fn render_pools(html: &mut String, pools: &[PoolRow]) {
    let rows = pools
        .iter()
        .map(|p| {
            vec![
                escape(&p.namespace),
                escape(&p.name),
                format!("{}–{}", p.min_size, p.max_size),
                p.total.to_string(),
                p.available.to_string(),
                p.leased.to_string(),
            ]
        })
        .collect();
    table(
        html,
        "pools",
        "ClusterPools",
        &[
            "namespace",
            "name",
            "size (min–max)",
            "instances",
            "available",
            "leased",
        ],
        rows,
    );
}

fn render_instances(html: &mut String, instances: &[InstanceRow]) {
    let rows = instances
        .iter()
        .map(|i| {
            vec![
                escape(&i.namespace),
                escape(&i.name),
                escape(&i.phase),
                escape(&i.reason),
            ]
        })
        .collect();
    table(
        html,
        "instances",
        "ClusterInstances",
        &["namespace", "name", "phase", "reason"],
        rows,
    );
}

fn render_leases(html: &mut String, leases: &[LeaseRow]) {
    let rows = leases
        .iter()
        .map(|l| {
            vec![
                escape(&l.namespace),
                escape(&l.name),
                escape(&l.pool),
                escape(&l.phase),
                escape(&l.instance),
            ]
        })
        .collect();
    table(
        html,
        "leases",
        "ClusterLeases",
        &["namespace", "name", "pool", "phase", "instance"],
        rows,
    );
}

fn render_actor(html: &mut String, node: &ActorNode) {
    let object = node
        .object
        .as_ref()
        .map(|o| format!(" <span class=\"object\">{}</span>", escape(o)))
        .unwrap_or_default();
    let _ = write!(
        html,
        "<li class=\"actor\" data-name=\"{name}\">{name}{object}",
        name = escape(&node.name)
    );
    if !node.children.is_empty() {
        html.push_str("<ul class=\"tree\">");
        for child in &node.children {
            render_actor(html, child);
        }
        html.push_str("</ul>");
    }
    html.push_str("</li>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_escapes_what_objects_say_and_nests_the_tree() {
        let snapshot = Snapshot {
            inventory: Inventory {
                instances: vec![InstanceRow {
                    namespace: "team-a".into(),
                    name: "ci-0".into(),
                    phase: "Provisioning".into(),
                    reason: "GuestStepFailed: <script>alert(1)</script>".into(),
                }],
                ..Inventory::default()
            },
            actors: Some(ActorNode {
                name: "root".into(),
                object: None,
                children: vec![ActorNode {
                    name: "supervisor/clusterinstance".into(),
                    object: None,
                    children: vec![ActorNode {
                        name: "clusterinstance/u1".into(),
                        object: Some("team-a/ci-0".into()),
                        children: Vec::new(),
                    }],
                }],
            }),
        };
        let html = render(&snapshot);
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("<p id=\"bundles\">None.</p>"));
        let root = html.find("data-name=\"root\"").expect("root");
        let supervisor = html
            .find("data-name=\"supervisor/clusterinstance\"")
            .expect("supervisor");
        let actor = html
            .find("data-name=\"clusterinstance/u1\"")
            .expect("actor");
        assert!(root < supervisor && supervisor < actor);
        assert!(html.contains("team-a/ci-0"));
        assert!(!html.contains("<script"), "no script of its own either");
    }

    #[test]
    fn a_standby_says_it_has_no_tree() {
        let html = render(&Snapshot::default());
        assert!(html.contains("this replica is on standby"));
    }
}
