//! Reading a finished index: what the Centroids view and `focus-lens centroids` show. Every
//! query reads the summary tables by primary key or index (a few hundred rows at most).

use super::store::{get_u64, get_usize, not_an_index, sql_error, Identity, Store};
use anyhow::{bail, Result};
use focus_core::analysis::categories::Category;
use rusqlite::{params, OptionalExtension};
use serde::Serialize;
use std::path::Path;

/// An open, finished index and what it was built from.
pub struct Index {
    pub store: Store,
    pub identity: Identity,
    pub documents: u64,
    pub tokens: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CentroidRow {
    pub layer: usize,
    pub group: usize,
    pub members: u64,
    pub label: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExampleRow {
    pub rank: usize,
    pub document: String,
    pub position: usize,
    pub membership: f64,
    pub left: String,
    pub token: String,
    pub right: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Share {
    /// A token's text or a category's name.
    pub name: String,
    pub count: u64,
    /// count / the centroid's members.
    pub share: f64,
    /// The same share in the whole corpus.
    pub base: f64,
    /// share / base.
    pub lift: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Neighbour {
    pub layer: usize,
    pub group: usize,
    /// Tokens that are members of both.
    pub shared: u64,
    /// shared / this centroid's members: P(neighbour | this).
    pub share: f64,
    /// shared / members of either.
    pub jaccard: f64,
    pub label: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CentroidDetail {
    pub layer: usize,
    pub group: usize,
    pub members: u64,
    /// Members / the layer's tokens.
    pub size_share: f64,
    pub held: u64,
    /// Mean membership over the tokens this group holds (its top-k).
    pub mean_held_membership: f64,
    pub label: String,
    pub rule: String,
    pub evidence: Vec<String>,
    /// Tokens held per membership bin (`HIST_BINS` bins over [0, 1]), and the tokens not held.
    pub histogram: Vec<u64>,
    pub not_held: u64,
    pub categories: Vec<Share>,
    /// The most frequent members.
    pub top_tokens: Vec<Share>,
    /// The most over-represented members (at least `MIN_LIFT_COUNT` each).
    pub lifted_tokens: Vec<Share>,
    pub examples: Vec<ExampleRow>,
    /// The best-overlapping centroid of every other layer, by layer.
    pub neighbours: Vec<Neighbour>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchHit {
    pub token: u32,
    pub text: String,
    pub layer: usize,
    pub group: usize,
    /// Occurrences of the token that are members of this centroid.
    pub count: u64,
    /// count / the token's occurrences in the corpus.
    pub share: f64,
    pub label: String,
}

impl Index {
    pub fn open(path: &Path) -> Result<Index> {
        let store = Store::open(path)?;
        if !store.complete() {
            bail!("{} is an unfinished index (its build was interrupted, or is under way): run `focus-lens index` again to finish it", path.display());
        }
        let identity = store.identity()?.ok_or_else(|| not_an_index(path, "no identity"))?;
        let num = |k: &str| -> Result<u64> { store.meta_value(k)?.trim().parse().map_err(|_| not_an_index(path, format!("its {k} in the meta table is not a count"))) };
        let (documents, tokens) = (num("documents")?, num("tokens")?);
        let index = Index { identity, documents, tokens, store };
        // The summary tables must all be there and readable (a damaged file fails here, once).
        let rows: i64 = index.store.sql(|c| c.query_row("SELECT count(*) FROM centroids", [], |r| r.get(0)))?;
        // Both at most 4096 x 256 (`Store::identity`): no overflow.
        let want = index.identity.n_layers * index.identity.groups;
        if rows != want as i64 {
            return Err(not_an_index(path, format!("{rows} centroid rows for {} layers x {} groups", index.identity.n_layers, index.identity.groups)));
        }
        for t in ["examples", "token_groups", "vocab", "categories", "comembership", "documents"] {
            index.store.sql(|c| c.query_row(&format!("SELECT count(*) FROM (SELECT 1 FROM {t} LIMIT 1)"), [], |r| r.get::<_, i64>(0)))?;
        }
        Ok(index)
    }

    fn check(&self, layer: usize, group: Option<usize>) -> Result<()> {
        let (n, k) = (self.identity.n_layers, self.identity.groups);
        if layer >= n {
            bail!("layer {layer} is out of range: the index has {n} layers (0..={})", n.saturating_sub(1));
        }
        if let Some(g) = group.filter(|&g| g >= k) {
            bail!("centroid {g} is out of range: the index has {k} per layer (0..={})", k.saturating_sub(1));
        }
        Ok(())
    }

    /// Every centroid of `layer` with its size and label.
    pub fn layer(&self, layer: usize) -> Result<Vec<CentroidRow>> {
        self.check(layer, None)?;
        self.store.sql(|c| {
            let mut st = c.prepare_cached("SELECT grp, members, label FROM centroids WHERE layer = ?1 ORDER BY grp")?;
            let rows = st.query_map([layer as i64], |r| Ok(CentroidRow { layer, group: get_usize(r, 0)?, members: get_u64(r, 1)?, label: r.get(2)? }))?.collect::<rusqlite::Result<Vec<_>>>();
            rows
        })
    }

    /// Everything the dashboard shows of one centroid; `n` rows of examples and tokens.
    pub fn centroid(&self, layer: usize, group: usize, n: usize) -> Result<CentroidDetail> {
        self.check(layer, Some(group))?;
        self.store.arm();
        let c = &self.store.conn;
        let path = &self.store.path;
        let e = |x| sql_error(path, x);
        type Row = (u64, u64, f64, String, String, String, String, String, String);
        let (members, held, held_mass, label, rule, evidence, histogram, by_category, lifted): Row = c
            .prepare_cached("SELECT members, held, held_mass, label, rule, evidence, histogram, by_category, lifted FROM centroids WHERE layer = ?1 AND grp = ?2")
            .map_err(e)?
            .query_row(params![layer as i64, group as i64], |r| Ok((get_u64(r, 0)?, get_u64(r, 1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?)))
            .map_err(e)?;
        let json_err = |e: serde_json::Error| not_an_index(path, format!("a damaged centroid row: {e}"));
        let evidence: Vec<String> = serde_json::from_str(&evidence).map_err(json_err)?;
        let histogram: Vec<u64> = serde_json::from_str(&histogram).map_err(json_err)?;
        let by_category: Vec<u64> = serde_json::from_str(&by_category).map_err(json_err)?;
        let lifted: Vec<(u32, u64, f64)> = serde_json::from_str(&lifted).map_err(json_err)?;
        // total(): a float, which no hostile count can overflow (sum() fails on it).
        let layer_tokens: f64 = c.prepare_cached("SELECT total(members) FROM centroids WHERE layer = ?1").map_err(e)?.query_row([layer as i64], |r| r.get(0)).map_err(e)?;
        let total = self.tokens.max(1) as f64;
        let m = members.max(1) as f64;
        let cat_totals: Vec<u64> = c
            .prepare_cached("SELECT count FROM categories ORDER BY category LIMIT ?1")
            .map_err(e)?
            .query_map([Category::COUNT as i64], |r| get_u64(r, 0))
            .map_err(e)?
            .collect::<rusqlite::Result<_>>()
            .map_err(e)?;
        let share = |name: String, count: u64, base_count: u64| {
            let (s, b) = (count as f64 / m, base_count as f64 / total);
            Share { name, count, share: s, base: b, lift: if b > 0.0 { s / b } else { 0.0 } }
        };
        let mut categories: Vec<Share> =
            Category::ALL.iter().enumerate().filter(|(i, _)| by_category.get(*i).is_some_and(|&n| n > 0)).map(|(i, cat)| share(cat.name().to_string(), by_category[i], cat_totals.get(i).copied().unwrap_or(0))).collect();
        categories.sort_by_key(|c| std::cmp::Reverse(c.count));
        let mut vocab = c.prepare_cached("SELECT text, count FROM vocab WHERE token = ?1").map_err(e)?;
        let mut token = |id: u32| -> Result<(String, u64)> {
            vocab.query_row([id as i64], |r| Ok((r.get(0)?, get_u64(r, 1)?))).optional().map_err(e)?.ok_or_else(|| not_an_index(path, format!("token {id} of centroid {layer}/{group} is missing from its vocab table")))
        };
        let top: Vec<(u32, u64)> = c
            .prepare_cached("SELECT token, count FROM token_groups WHERE layer = ?1 AND grp = ?2 ORDER BY count DESC, token LIMIT ?3")
            .map_err(e)?
            .query_map(params![layer as i64, group as i64, n as i64], |r| Ok((r.get(0)?, get_u64(r, 1)?)))
            .map_err(e)?
            .collect::<rusqlite::Result<_>>()
            .map_err(e)?;
        let mut top_tokens = Vec::new();
        for (id, count) in top {
            let (text, base) = token(id)?;
            top_tokens.push(share(text, count, base));
        }
        let mut lifted_tokens = Vec::new();
        for (id, count, _) in lifted.into_iter().take(n) {
            let (text, base) = token(id)?;
            lifted_tokens.push(share(text, count, base));
        }
        let examples = c
            .prepare_cached(
                "SELECT e.rank, d.path, e.pos, e.membership, e.left, e.token, e.right FROM examples e JOIN documents d ON d.id = e.doc
                 WHERE e.layer = ?1 AND e.grp = ?2 ORDER BY e.rank LIMIT ?3",
            )
            .map_err(e)?
            .query_map(params![layer as i64, group as i64, n as i64], |r| {
                Ok(ExampleRow { rank: get_usize(r, 0)?, document: r.get(1)?, position: get_usize(r, 2)?, membership: r.get(3)?, left: r.get(4)?, token: r.get(5)?, right: r.get(6)? })
            })
            .map_err(e)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(e)?;
        // Neighbours: per other layer, the centroid sharing most members.
        let mut neighbours = Vec::new();
        {
            let mut st = c
                .prepare_cached(
                    "SELECT m.lb, m.gb, m.count, o.members, o.label FROM comembership m JOIN centroids o ON o.layer = m.lb AND o.grp = m.gb
                 WHERE m.la = ?1 AND m.ga = ?2 ORDER BY m.lb, m.count DESC, m.gb",
                )
                .map_err(e)?;
            let rows = st.query_map(params![layer as i64, group as i64], |r| Ok((get_usize(r, 0)?, get_usize(r, 1)?, get_u64(r, 2)?, get_u64(r, 3)?, r.get::<_, String>(4)?))).map_err(e)?;
            for row in rows {
                let (lb, gb, shared, other, label) = row.map_err(e)?;
                if neighbours.last().is_some_and(|n: &Neighbour| n.layer == lb) {
                    continue;
                }
                let union = members.saturating_add(other).saturating_sub(shared).max(1);
                neighbours.push(Neighbour { layer: lb, group: gb, shared, share: shared as f64 / m, jaccard: shared as f64 / union as f64, label });
            }
        }
        Ok(CentroidDetail {
            layer,
            group,
            members,
            size_share: members as f64 / layer_tokens.max(1.0),
            held,
            mean_held_membership: held_mass / held.max(1) as f64,
            label,
            rule,
            evidence,
            histogram,
            not_held: self.tokens.saturating_sub(held),
            categories,
            top_tokens,
            lifted_tokens,
            examples,
            neighbours,
        })
    }

    /// Which centroids hold a token, at `layer` or every layer. A query with surrounding
    /// whitespace (" of") is matched exactly; one without ("of") matches every token that is it
    /// once its whitespace is trimmed (" of", "of", "of\n"). Per token and layer, the centroids
    /// by how many of its occurrences they hold.
    pub fn search(&self, query: &str, layer: Option<usize>) -> Result<Vec<SearchHit>> {
        if let Some(l) = layer {
            self.check(l, None)?;
        }
        if query.is_empty() {
            bail!("search for what? The query is empty");
        }
        let sql = if query.trim() == query {
            "SELECT token, text, count FROM vocab WHERE trim(text, ' '||char(9)||char(10)||char(13)) = ?1 ORDER BY count DESC, token"
        } else {
            "SELECT token, text, count FROM vocab WHERE text = ?1 ORDER BY token"
        };
        let (lo, hi) = layer.map_or((0, self.identity.n_layers as i64 - 1), |l| (l as i64, l as i64));
        self.store.sql(|c| {
            let tokens: Vec<(u32, String, u64)> = c.prepare_cached(sql)?.query_map([query], |r| Ok((r.get(0)?, r.get(1)?, get_u64(r, 2)?)))?.collect::<rusqlite::Result<_>>()?;
            let mut st = c.prepare_cached(
                "SELECT t.layer, t.grp, t.count, c.label FROM token_groups t JOIN centroids c ON c.layer = t.layer AND c.grp = t.grp
             WHERE t.layer BETWEEN ?1 AND ?2 AND t.token = ?3 ORDER BY t.layer, t.count DESC, t.grp",
            )?;
            let mut hits = Vec::new();
            for (id, text, total) in tokens {
                let rows = st.query_map(params![lo, hi, id as i64], |r| Ok((get_usize(r, 0)?, get_usize(r, 1)?, get_u64(r, 2)?, r.get::<_, String>(3)?)))?;
                for row in rows {
                    let (layer, group, count, label) = row?;
                    hits.push(SearchHit { token: id, text: text.clone(), layer, group, count, share: count as f64 / total.max(1) as f64, label });
                }
            }
            Ok(hits)
        })
    }
}
