//! `sum` of integers in 128 bits: a total that does not fit the sum's
//! type is an error, never a wrapped value (see the parent module).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, PrimitiveArray, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type, UInt64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator,
    ReversedUDAF, Signature,
};

use super::sql_name;

/// `sum` with integers summed in 128 bits; see the module documentation.
pub(in crate::sql) fn checked_sum() -> AggregateUDF {
    AggregateUDF::new_from_impl(CheckedSum::default())
}

#[derive(Debug, Default, PartialEq, Eq, Hash)]
struct CheckedSum {
    sum: Sum,
}

/// The integer type a sum of `data_type` returns, if it is one.
fn integer_sum(data_type: &DataType) -> Option<IntegerSum> {
    match data_type {
        DataType::Int64 => Some(IntegerSum::Signed),
        DataType::UInt64 => Some(IntegerSum::Unsigned),
        _ => None,
    }
}

/// Which 64-bit integer a checked sum returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IntegerSum {
    Signed,
    Unsigned,
}

impl IntegerSum {
    fn data_type(self) -> DataType {
        match self {
            IntegerSum::Signed => DataType::Int64,
            IntegerSum::Unsigned => DataType::UInt64,
        }
    }

    /// The non-null values of `array` (of this type), widened.
    fn values(self, array: &dyn Array) -> Box<dyn Iterator<Item = i128> + '_> {
        match self {
            IntegerSum::Signed => Box::new(widened::<Int64Type>(array)),
            IntegerSum::Unsigned => Box::new(widened::<UInt64Type>(array)),
        }
    }

    /// The value at `row` of `array` (of this type), `None` for NULL.
    fn value(self, array: &dyn Array, row: usize) -> Option<i128> {
        if array.is_null(row) {
            return None;
        }
        Some(match self {
            IntegerSum::Signed => i128::from(array.as_primitive::<Int64Type>().value(row)),
            IntegerSum::Unsigned => i128::from(array.as_primitive::<UInt64Type>().value(row)),
        })
    }

    /// `total` as a value of this type, or the error that it does not fit.
    fn fit(self, total: i128) -> Result<ScalarValue> {
        let out_of_range = || {
            DataFusionError::Execution(format!(
                "{} out of range: sum is {total}",
                sql_name(&self.data_type())
            ))
        };
        Ok(match self {
            IntegerSum::Signed => {
                ScalarValue::Int64(Some(i64::try_from(total).map_err(|_| out_of_range())?))
            }
            IntegerSum::Unsigned => {
                ScalarValue::UInt64(Some(u64::try_from(total).map_err(|_| out_of_range())?))
            }
        })
    }

    /// The totals (`None`: no value was summed) as an array of this type.
    fn array(self, totals: Vec<Option<i128>>) -> Result<ArrayRef> {
        let values = totals
            .into_iter()
            .map(|total| match total {
                Some(total) => self.fit(total),
                None => ScalarValue::try_from(&self.data_type()),
            })
            .collect::<Result<Vec<_>>>()?;
        if values.is_empty() {
            return Ok(datafusion::arrow::array::new_empty_array(&self.data_type()));
        }
        ScalarValue::iter_to_array(values)
    }
}

fn widened<T: ArrowPrimitiveType>(array: &dyn Array) -> impl Iterator<Item = i128> + '_
where
    T::Native: Into<i128>,
{
    array.as_primitive::<T>().iter().flatten().map(Into::into)
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        self.sum.name()
    }

    fn signature(&self) -> &Signature {
        self.sum.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.sum.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        match integer_sum(args.return_field.data_type()) {
            Some(kind) if args.is_distinct => Ok(Box::new(DistinctIntegerSum::new(kind))),
            Some(kind) => Ok(Box::new(IntegerSumAccumulator::new(kind))),
            None => self.sum.accumulator(args),
        }
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        match integer_sum(args.return_type()) {
            // A partial total and how many values it summed (the sliding
            // accumulator needs the count; the others pass it along). A
            // DISTINCT sum passes its values, as DataFusion's does.
            Some(kind) if !args.is_distinct => Ok(vec![
                Arc::new(Field::new(
                    format_state_name(args.name, "sum"),
                    kind.data_type(),
                    true,
                )),
                Arc::new(Field::new(
                    format_state_name(args.name, "count"),
                    DataType::UInt64,
                    true,
                )),
            ]),
            _ => self.sum.state_fields(args),
        }
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.sum.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        match integer_sum(args.return_field.data_type()) {
            Some(kind) => Ok(Box::new(IntegerSumGroups::new(kind))),
            None => self.sum.create_groups_accumulator(args),
        }
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        match integer_sum(args.return_field.data_type()) {
            Some(kind) if args.is_distinct => Ok(Box::new(DistinctIntegerSum::new(kind))),
            Some(kind) => Ok(Box::new(IntegerSumAccumulator::new(kind))),
            None => self.sum.create_sliding_accumulator(args),
        }
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        self.sum.reverse_expr()
    }

    fn order_sensitivity(&self) -> datafusion::logical_expr::utils::AggregateOrderSensitivity {
        self.sum.order_sensitivity()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.sum.documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> datafusion::logical_expr::SetMonotonicity {
        self.sum.set_monotonicity(data_type)
    }
}

/// A checked integer sum of one group (also over a sliding window frame:
/// retracting subtracts).
#[derive(Debug)]
struct IntegerSumAccumulator {
    kind: IntegerSum,
    total: i128,
    count: u64,
}

impl IntegerSumAccumulator {
    fn new(kind: IntegerSum) -> Self {
        Self {
            kind,
            total: 0,
            count: 0,
        }
    }
}

impl Accumulator for IntegerSumAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let array = &values[0];
        self.total += self.kind.values(array).sum::<i128>();
        self.count += (array.len() - array.null_count()) as u64;
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let array = &values[0];
        self.total -= self.kind.values(array).sum::<i128>();
        self.count -= (array.len() - array.null_count()) as u64;
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.total += self.kind.values(&states[0]).sum::<i128>();
        for count in states[1].as_primitive::<UInt64Type>().iter().flatten() {
            self.count += count;
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.count == 0 {
            return ScalarValue::try_from(&self.kind.data_type());
        }
        self.kind.fit(self.total)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            self.evaluate()?,
            ScalarValue::UInt64(Some(self.count)),
        ])
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// A checked `sum(DISTINCT …)` of integers: each distinct value with how
/// many times it is in the frame, so that retracting works over a sliding
/// window frame.
#[derive(Debug)]
struct DistinctIntegerSum {
    kind: IntegerSum,
    values: HashMap<i128, u64>,
}

impl DistinctIntegerSum {
    fn new(kind: IntegerSum) -> Self {
        Self {
            kind,
            values: HashMap::new(),
        }
    }
}

impl Accumulator for DistinctIntegerSum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for v in self.kind.values(&values[0]) {
            *self.values.entry(v).or_default() += 1;
        }
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for v in self.kind.values(&values[0]) {
            if let Some(n) = self.values.get_mut(&v) {
                *n -= 1;
                if *n == 0 {
                    self.values.remove(&v);
                }
            }
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let lists = states[0].as_list::<i32>();
        for list in lists.iter().flatten() {
            self.update_batch(&[list])?;
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.values.is_empty() {
            return ScalarValue::try_from(&self.kind.data_type());
        }
        self.kind.fit(self.values.keys().sum())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let values = self
            .values
            .keys()
            .map(|&v| self.kind.fit(v))
            .collect::<Result<Vec<_>>>()?;
        let list = ScalarValue::new_list_nullable(&values, &self.kind.data_type());
        Ok(vec![ScalarValue::List(list)])
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.values.capacity() * 32
    }
}

/// Checked integer sums of many groups.
struct IntegerSumGroups {
    kind: IntegerSum,
    totals: Vec<i128>,
    counts: Vec<u64>,
}

impl fmt::Debug for IntegerSumGroups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IntegerSumGroups({} groups)", self.totals.len())
    }
}

impl IntegerSumGroups {
    fn new(kind: IntegerSum) -> Self {
        Self {
            kind,
            totals: Vec::new(),
            counts: Vec::new(),
        }
    }

    /// Adds `values[row]` (and `counts[row]`, or 1 for a value) to the
    /// group `group_indices[row]` for every row `filter` keeps.
    fn add(
        &mut self,
        values: &dyn Array,
        counts: Option<&PrimitiveArray<UInt64Type>>,
        group_indices: &[usize],
        filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) {
        self.totals.resize(total_num_groups, 0);
        self.counts.resize(total_num_groups, 0);
        for (row, &group) in group_indices.iter().enumerate() {
            if filter.is_some_and(|f| !f.is_valid(row) || !f.value(row)) {
                continue;
            }
            let Some(value) = self.kind.value(values, row) else {
                continue;
            };
            self.totals[group] += value;
            self.counts[group] += counts.map_or(1, |c| c.value(row));
        }
    }

    fn take(&mut self, emit_to: EmitTo) -> (Vec<Option<i128>>, Vec<u64>) {
        let totals = emit_to.take_needed(&mut self.totals);
        let counts = emit_to.take_needed(&mut self.counts);
        let totals = totals
            .into_iter()
            .zip(&counts)
            .map(|(t, &n)| (n > 0).then_some(t))
            .collect();
        (totals, counts)
    }
}

impl GroupsAccumulator for IntegerSumGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.add(
            &values[0],
            None,
            group_indices,
            opt_filter,
            total_num_groups,
        );
        Ok(())
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        let counts = values[1].as_primitive::<UInt64Type>();
        self.add(
            &values[0],
            Some(counts),
            group_indices,
            None,
            total_num_groups,
        );
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        // Each row its own group: its value (NULL when filtered out) and
        // whether it counts.
        let kept = |row: usize| opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
        let array = &values[0];
        let totals = (0..array.len())
            .map(|row| self.kind.value(array, row).filter(|_| kept(row)))
            .collect::<Vec<_>>();
        let counts: UInt64Array = totals
            .iter()
            .map(|t| Some(u64::from(t.is_some())))
            .collect();
        Ok(vec![self.kind.array(totals)?, Arc::new(counts)])
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (totals, _) = self.take(emit_to);
        self.kind.array(totals)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (totals, counts) = self.take(emit_to);
        Ok(vec![
            self.kind.array(totals)?,
            Arc::new(UInt64Array::from(counts)),
        ])
    }

    fn size(&self) -> usize {
        self.totals.capacity() * 16 + self.counts.capacity() * 8
    }
}
