//! A small linear-programming layer over the `clarabel` interior-point solver.
//!
//! The LP-based policies (Gavel's allocations) and the fluid bounds build their problems
//! through [`LinearProgram`]: variables with bounds, linear constraints (`<=`, `>=`, `=`) and
//! a linear objective to minimise or maximise. Solving translates the problem into
//! clarabel's conic form (`A x + s = b`, `s` in a product of the zero cone and the
//! nonnegative orthant) and maps the solver's status to a [`Solution`] or a typed
//! [`LpError`].
//!
//! An interior-point method is used on purpose: Gavel solved its LPs with ECOS, also an
//! interior-point method, and its LPs have many optimal solutions. An interior-point solver
//! converges towards the centre of the optimal face, so it lands near the solution Gavel
//! used, where a simplex method would pick an arbitrary vertex.

use clarabel::algebra::CscMatrix;
use clarabel::solver::{
    DefaultSettingsBuilder, DefaultSolution, DefaultSolver, IPSolver, NonnegativeConeT,
    SolverStatus, SupportedConeT, ZeroConeT,
};

/// A variable of one [`LinearProgram`], as an index into its variable list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Var(usize);

impl Var {
    /// The variable's index in [`Solution::values`].
    pub fn index(self) -> usize {
        self.0
    }
}

/// The relation of a linear constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// `sum <= rhs`.
    AtMost,
    /// `sum >= rhs`.
    AtLeast,
    /// `sum == rhs`.
    Equal,
}

/// Whether the objective is minimised or maximised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Sense {
    /// Minimise the objective (the default; with no objective terms this is a pure
    /// feasibility problem).
    #[default]
    Minimize,
    /// Maximise the objective.
    Maximize,
}

#[derive(Clone, Debug)]
struct Constraint {
    terms: Vec<(Var, f64)>,
    relation: Relation,
    rhs: f64,
}

/// A constraint of a [`LinearProgram`], to read its dual value from a [`Solution`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row(usize);

/// A linear program under construction.
#[derive(Clone, Debug, Default)]
pub struct LinearProgram {
    lower: Vec<f64>,
    upper: Vec<f64>,
    constraints: Vec<Constraint>,
    objective: Vec<(Var, f64)>,
    sense: Sense,
}

/// Why an LP could not be solved.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LpError {
    /// No point satisfies every constraint.
    #[error("the linear program is infeasible")]
    Infeasible,
    /// The objective can be improved without limit.
    #[error("the linear program is unbounded")]
    Unbounded,
    /// The solver stopped without a trustworthy answer (iteration limit, lack of progress,
    /// numerical trouble).
    #[error("the LP solver stopped without a solution: {status}")]
    Numerical {
        /// The solver's own status, for diagnosis.
        status: String,
    },
    /// A coefficient, bound or right-hand side is NaN, or a bound or coefficient is
    /// infinite where a finite number is needed.
    #[error("invalid LP input: {0}")]
    InvalidInput(String),
}

/// An optimal (or, for a problem with no objective, feasible) point.
#[derive(Clone, Debug, PartialEq)]
pub struct Solution {
    values: Vec<f64>,
    duals: Vec<f64>,
    objective: f64,
    reduced_accuracy: bool,
}

impl Solution {
    /// The value of one variable.
    pub fn value(&self, v: Var) -> f64 {
        self.values.get(v.0).copied().unwrap_or(0.0)
    }

    /// A constraint's dual value (shadow price): how much the objective would improve per
    /// unit the constraint is relaxed; 0 for a constraint that does not bind. Non-negative
    /// for inequalities.
    pub fn dual(&self, r: Row) -> f64 {
        self.duals.get(r.0).copied().unwrap_or(0.0)
    }

    /// All variable values, indexed by [`Var::index`].
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The objective's value at this point, in the problem's own sense.
    pub fn objective(&self) -> f64 {
        self.objective
    }

    /// True when the solver met only its relaxed tolerances ("almost solved").
    pub fn reduced_accuracy(&self) -> bool {
        self.reduced_accuracy
    }
}

impl LinearProgram {
    /// An empty problem: no variables, no constraints, nothing to optimise.
    pub fn new() -> Self {
        LinearProgram::default()
    }

    /// Adds a variable with `lower <= v <= upper`; either bound may be infinite
    /// (`f64::NEG_INFINITY`, `f64::INFINITY`) for a free side.
    pub fn add_var(&mut self, lower: f64, upper: f64) -> Var {
        self.lower.push(lower);
        self.upper.push(upper);
        Var(self.lower.len() - 1)
    }

    /// Adds a variable with `v >= 0` and no upper bound.
    pub fn add_nonneg(&mut self) -> Var {
        self.add_var(0.0, f64::INFINITY)
    }

    /// Number of variables.
    pub fn var_count(&self) -> usize {
        self.lower.len()
    }

    /// Number of constraints (bounds not counted).
    pub fn constraint_count(&self) -> usize {
        self.constraints.len()
    }

    /// Adds `sum(coef * var) <relation> rhs`. Zero coefficients are dropped. The returned
    /// handle reads the constraint's dual value from a [`Solution`].
    pub fn add_constraint(
        &mut self,
        terms: impl IntoIterator<Item = (Var, f64)>,
        relation: Relation,
        rhs: f64,
    ) -> Row {
        let terms = terms.into_iter().filter(|(_, c)| *c != 0.0).collect();
        self.constraints.push(Constraint {
            terms,
            relation,
            rhs,
        });
        Row(self.constraints.len() - 1)
    }

    /// Adds `sum(coef * var) <= rhs`.
    pub fn at_most(&mut self, terms: impl IntoIterator<Item = (Var, f64)>, rhs: f64) -> Row {
        self.add_constraint(terms, Relation::AtMost, rhs)
    }

    /// Adds `sum(coef * var) >= rhs`.
    pub fn at_least(&mut self, terms: impl IntoIterator<Item = (Var, f64)>, rhs: f64) -> Row {
        self.add_constraint(terms, Relation::AtLeast, rhs)
    }

    /// Adds `sum(coef * var) == rhs`.
    pub fn equal(&mut self, terms: impl IntoIterator<Item = (Var, f64)>, rhs: f64) -> Row {
        self.add_constraint(terms, Relation::Equal, rhs)
    }

    /// Sets the objective to minimise `sum(coef * var)`.
    pub fn minimize(&mut self, terms: impl IntoIterator<Item = (Var, f64)>) {
        self.objective = terms.into_iter().collect();
        self.sense = Sense::Minimize;
    }

    /// Sets the objective to maximise `sum(coef * var)`.
    pub fn maximize(&mut self, terms: impl IntoIterator<Item = (Var, f64)>) {
        self.objective = terms.into_iter().collect();
        self.sense = Sense::Maximize;
    }

    fn check(&self) -> Result<(), LpError> {
        let n = self.var_count();
        let var_ok = |v: Var| {
            if v.0 < n {
                Ok(())
            } else {
                Err(LpError::InvalidInput(format!(
                    "variable {} does not belong to this LP",
                    v.0
                )))
            }
        };
        for (i, (&lo, &hi)) in self.lower.iter().zip(&self.upper).enumerate() {
            if lo.is_nan() || hi.is_nan() || lo == f64::INFINITY || hi == f64::NEG_INFINITY {
                return Err(LpError::InvalidInput(format!(
                    "variable {i} has bounds [{lo}, {hi}]"
                )));
            }
        }
        for (k, c) in self.constraints.iter().enumerate() {
            if !c.rhs.is_finite() {
                return Err(LpError::InvalidInput(format!(
                    "constraint {k} has right-hand side {}",
                    c.rhs
                )));
            }
            for &(v, coef) in &c.terms {
                var_ok(v)?;
                if !coef.is_finite() {
                    return Err(LpError::InvalidInput(format!(
                        "constraint {k} has coefficient {coef}"
                    )));
                }
            }
        }
        for &(v, coef) in &self.objective {
            var_ok(v)?;
            if !coef.is_finite() {
                return Err(LpError::InvalidInput(format!(
                    "objective coefficient {coef}"
                )));
            }
        }
        Ok(())
    }

    /// Solves the problem.
    pub fn solve(&self) -> Result<Solution, LpError> {
        self.check()?;
        let form = self.conic_rows()?;
        // A problem without variables is decided by its constant rows alone.
        if self.var_count() == 0 {
            let ok = form.eq.iter().all(|(_, b)| b.abs() <= 1e-9)
                && form.le.iter().all(|(_, b)| *b >= -1e-9);
            return if ok {
                Ok(Solution {
                    values: Vec::new(),
                    duals: vec![0.0; self.constraints.len()],
                    objective: 0.0,
                    reduced_accuracy: false,
                })
            } else {
                Err(LpError::Infeasible)
            };
        }
        let mut solver = self.clarabel(&form)?;
        solver.solve();
        self.solution(&form, &solver.solution)
    }

    /// The constraints and variable bounds as rows of clarabel's conic form: equalities
    /// first (zero cone), then inequalities written as `a x <= b` (nonnegative cone), as
    /// clarabel wants the cones in blocks.
    fn conic_rows(&self) -> Result<ConicRows, LpError> {
        let mut form = ConicRows::default();
        for c in &self.constraints {
            let row: Vec<(usize, f64)> = c.terms.iter().map(|&(v, a)| (v.0, a)).collect();
            match c.relation {
                Relation::Equal => {
                    form.placed.push((true, form.eq.len()));
                    form.eq.push((row, c.rhs));
                }
                Relation::AtMost => {
                    form.placed.push((false, form.le.len()));
                    form.le.push((row, c.rhs));
                }
                Relation::AtLeast => {
                    form.placed.push((false, form.le.len()));
                    form.le
                        .push((row.into_iter().map(|(j, a)| (j, -a)).collect(), -c.rhs));
                }
            }
        }
        for j in 0..self.var_count() {
            let (lo, hi) = (self.lower[j], self.upper[j]);
            if lo == hi {
                form.eq.push((vec![(j, 1.0)], lo));
                continue;
            }
            if lo > hi {
                return Err(LpError::Infeasible);
            }
            if lo.is_finite() {
                form.le.push((vec![(j, -1.0)], -lo));
            }
            if hi.is_finite() {
                form.le.push((vec![(j, 1.0)], hi));
            }
        }
        Ok(form)
    }

    /// A clarabel solver set up for the rows and this problem's objective.
    fn clarabel(&self, form: &ConicRows) -> Result<DefaultSolver<f64>, LpError> {
        let n = self.var_count();
        let m = form.eq.len() + form.le.len();
        let mut rows_i = Vec::new();
        let mut cols_j = Vec::new();
        let mut vals = Vec::new();
        let mut b = Vec::with_capacity(m);
        for (r, (row, rhs)) in form.eq.iter().chain(form.le.iter()).enumerate() {
            for &(j, a) in row {
                rows_i.push(r);
                cols_j.push(j);
                vals.push(a);
            }
            b.push(*rhs);
        }
        let a_mat = CscMatrix::new_from_triplets(m, n, rows_i, cols_j, vals);
        let p_mat = CscMatrix::<f64>::zeros((n, n));
        let sign = match self.sense {
            Sense::Minimize => 1.0,
            Sense::Maximize => -1.0,
        };
        let mut q = vec![0.0; n];
        for &(v, coef) in &self.objective {
            q[v.0] += sign * coef;
        }
        let mut cones: Vec<SupportedConeT<f64>> = Vec::new();
        if !form.eq.is_empty() {
            cones.push(ZeroConeT(form.eq.len()));
        }
        if !form.le.is_empty() {
            cones.push(NonnegativeConeT(form.le.len()));
        }
        let settings = DefaultSettingsBuilder::default()
            .verbose(false)
            .max_iter(200)
            .build()
            .map_err(|e| LpError::Numerical {
                status: format!("settings: {e:?}"),
            })?;
        DefaultSolver::new(&p_mat, &q, &a_mat, &b, &cones, settings).map_err(|e| {
            LpError::Numerical {
                status: format!("setup: {e}"),
            }
        })
    }

    /// The solver's result as a [`Solution`] (values, each constraint's dual, objective)
    /// or the [`LpError`] its status means.
    fn solution(&self, form: &ConicRows, sol: &DefaultSolution<f64>) -> Result<Solution, LpError> {
        match sol.status {
            SolverStatus::Solved | SolverStatus::AlmostSolved => {
                let values = sol.x.clone();
                let objective = self.objective.iter().map(|&(v, c)| c * values[v.0]).sum();
                let eq_count = form.eq.len();
                let duals = form
                    .placed
                    .iter()
                    .map(|&(eq, r)| sol.z[if eq { r } else { eq_count + r }])
                    .collect();
                Ok(Solution {
                    values,
                    duals,
                    objective,
                    reduced_accuracy: sol.status == SolverStatus::AlmostSolved,
                })
            }
            SolverStatus::PrimalInfeasible | SolverStatus::AlmostPrimalInfeasible => {
                Err(LpError::Infeasible)
            }
            SolverStatus::DualInfeasible | SolverStatus::AlmostDualInfeasible => {
                Err(LpError::Unbounded)
            }
            other => Err(LpError::Numerical {
                status: format!("{other:?}"),
            }),
        }
    }
}

/// A problem's rows in clarabel's conic form, before they become its sparse matrix.
#[derive(Default)]
struct ConicRows {
    /// `a x = b` rows (the zero cone): sparse `(variable, coefficient)` terms and `b`.
    eq: Vec<(Vec<(usize, f64)>, f64)>,
    /// `a x <= b` rows (the nonnegative cone).
    le: Vec<(Vec<(usize, f64)>, f64)>,
    /// Where each constraint landed, in order: (in the equality block?, row in its block).
    placed: Vec<(bool, usize)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn solves_a_textbook_maximisation() {
        // max 3x + 5y, x <= 4, 2y <= 12, 3x + 2y <= 18, x, y >= 0: optimum (2, 6), value 36.
        let mut lp = LinearProgram::new();
        let x = lp.add_nonneg();
        let y = lp.add_nonneg();
        lp.at_most([(x, 1.0)], 4.0);
        lp.at_most([(y, 2.0)], 12.0);
        lp.at_most([(x, 3.0), (y, 2.0)], 18.0);
        lp.maximize([(x, 3.0), (y, 5.0)]);
        let s = lp.solve().unwrap();
        assert!(close(s.value(x), 2.0), "x = {}", s.value(x));
        assert!(close(s.value(y), 6.0), "y = {}", s.value(y));
        assert!(close(s.objective(), 36.0));
    }

    #[test]
    fn duals_price_the_binding_constraints() {
        // The textbook problem again: its dual optimum is (0, 1.5, 1) for the three rows.
        let mut lp = LinearProgram::new();
        let x = lp.add_nonneg();
        let y = lp.add_nonneg();
        let r1 = lp.at_most([(x, 1.0)], 4.0);
        let r2 = lp.at_most([(y, 2.0)], 12.0);
        let r3 = lp.at_most([(x, 3.0), (y, 2.0)], 18.0);
        lp.maximize([(x, 3.0), (y, 5.0)]);
        let s = lp.solve().unwrap();
        assert!(close(s.dual(r1), 0.0), "{}", s.dual(r1));
        assert!(close(s.dual(r2), 1.5), "{}", s.dual(r2));
        assert!(close(s.dual(r3), 1.0), "{}", s.dual(r3));
        // An at-least row of a minimisation: min 2x s.t. x >= 3 has dual 2.
        let mut lp = LinearProgram::new();
        let x = lp.add_nonneg();
        let r = lp.at_least([(x, 1.0)], 3.0);
        lp.minimize([(x, 2.0)]);
        assert!(close(lp.solve().unwrap().dual(r), 2.0));
    }

    #[test]
    fn honours_bounds_equalities_and_at_least() {
        // min x + y, x + y >= 3, x - y == 1, 0 <= x <= 10, y in [-5, 1.5]: x = 2, y = 1.
        let mut lp = LinearProgram::new();
        let x = lp.add_var(0.0, 10.0);
        let y = lp.add_var(-5.0, 1.5);
        lp.at_least([(x, 1.0), (y, 1.0)], 3.0);
        lp.equal([(x, 1.0), (y, -1.0)], 1.0);
        lp.minimize([(x, 1.0), (y, 1.0)]);
        let s = lp.solve().unwrap();
        assert!(
            close(s.value(x), 2.0) && close(s.value(y), 1.0),
            "{:?}",
            s.values()
        );
        // A fixed variable (equal bounds) stays at its value.
        let mut lp = LinearProgram::new();
        let z = lp.add_var(2.5, 2.5);
        lp.maximize([(z, 1.0)]);
        assert!(close(lp.solve().unwrap().value(z), 2.5));
    }

    #[test]
    fn reports_infeasible_and_unbounded() {
        let mut lp = LinearProgram::new();
        let x = lp.add_nonneg();
        lp.at_most([(x, 1.0)], -1.0);
        assert_eq!(lp.solve(), Err(LpError::Infeasible));

        let mut lp = LinearProgram::new();
        let x = lp.add_nonneg();
        lp.maximize([(x, 1.0)]);
        assert_eq!(lp.solve(), Err(LpError::Unbounded));

        let mut lp = LinearProgram::new();
        lp.add_var(3.0, 1.0);
        assert_eq!(lp.solve(), Err(LpError::Infeasible));
    }

    #[test]
    fn refuses_nan_and_foreign_variables() {
        let mut lp = LinearProgram::new();
        let x = lp.add_nonneg();
        lp.at_most([(x, f64::NAN)], 1.0);
        assert!(matches!(lp.solve(), Err(LpError::InvalidInput(_))));

        let mut other = LinearProgram::new();
        other.add_nonneg();
        let foreign = other.add_nonneg();
        let mut lp = LinearProgram::new();
        lp.add_nonneg();
        lp.maximize([(foreign, 1.0)]);
        assert!(matches!(lp.solve(), Err(LpError::InvalidInput(_))));
    }

    #[test]
    fn feasibility_problem_returns_an_interior_point() {
        // No objective: any feasible point is acceptable, and the interior-point method
        // returns one strictly inside the box rather than a vertex.
        let mut lp = LinearProgram::new();
        let x = lp.add_nonneg();
        let y = lp.add_nonneg();
        lp.at_most([(x, 1.0), (y, 1.0)], 1.0);
        let s = lp.solve().unwrap();
        assert!(s.value(x) > 1e-3 && s.value(y) > 1e-3, "{:?}", s.values());
        assert!(s.value(x) + s.value(y) <= 1.0 + 1e-7);
    }

    #[test]
    fn empty_problem_is_decided_by_constants() {
        let mut lp = LinearProgram::new();
        assert!(lp.solve().is_ok());
        lp.at_most([], -1.0);
        assert_eq!(lp.solve(), Err(LpError::Infeasible));
    }

    #[test]
    fn max_min_in_epigraph_form() {
        // max t, t <= x, t <= y, x + y + z <= 2: t = 1 needs x = y = 1, so z must be 0.
        let mut lp = LinearProgram::new();
        let t = lp.add_var(f64::NEG_INFINITY, f64::INFINITY);
        let x = lp.add_nonneg();
        let y = lp.add_nonneg();
        let z = lp.add_nonneg();
        lp.at_most([(t, 1.0), (x, -1.0)], 0.0);
        lp.at_most([(t, 1.0), (y, -1.0)], 0.0);
        lp.at_most([(x, 1.0), (y, 1.0), (z, 1.0)], 2.0);
        lp.maximize([(t, 1.0)]);
        let s = lp.solve().unwrap();
        assert!(close(s.objective(), 1.0));
        assert!(s.value(z).abs() < 1e-6);
    }
}
