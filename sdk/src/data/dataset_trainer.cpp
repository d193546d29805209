#include "edgefl/dataset_trainer.h"

namespace edgefl {

DatasetTrainer::DatasetTrainer(const Dataset* data, std::vector<uint32_t> indices)
    : data_(data), indices_(std::move(indices)) {}

size_t DatasetTrainer::memory_bytes(const RoundTask& task) const {
  ModelSpec spec;
  if (parse_model_spec(task.model_spec.c_str(), &spec) != Status::kOk) return 0;
  return SgdTrainer::workspace_bytes(spec, task.training);
}

Status DatasetTrainer::prepare(const RoundTask& task) {
  if (data_ == nullptr || indices_.empty()) return Status::kInvalidArgument;
  // A new model, or a batch larger than the workspace was sized for: (re)initialise.
  const bool reinit = task.model_spec != spec_text_ || !trainer_.initialized() ||
                      trainer_.set_config(task.training) != Status::kOk;
  if (reinit) {
    ModelSpec spec;
    EDGEFL_RETURN_IF_ERROR(parse_model_spec(task.model_spec.c_str(), &spec));
    if (parameter_count(spec) != task.parameter_count || input_dim(spec) != data_->dim())
      return Status::kInvalidSpec;
    workspace_.assign(SgdTrainer::workspace_bytes(spec, task.training), 0);
    EDGEFL_RETURN_IF_ERROR(trainer_.init(spec, task.training, {workspace_.data(), workspace_.size()}));
    DataView view{data_->inputs.data(), data_->labels.data(), data_->count,
                  data_->dim(),         indices_.data(),      indices_.size()};
    EDGEFL_RETURN_IF_ERROR(trainer_.set_data(view));
    spec_ = spec;
    spec_text_ = task.model_spec;
  }
  trainer_.set_seed(task.training.seed);
  return Status::kOk;
}

Status DatasetTrainer::fit(Span<const float> global, Span<float> delta, uint32_t* samples, float* loss) {
  FitResult r;
  EDGEFL_RETURN_IF_ERROR(trainer_.fit(global, delta, &r));
  // The update's weight is the client's sample count (FedAvg), not samples x epochs.
  *samples = static_cast<uint32_t>(indices_.size());
  *loss = r.loss;
  return Status::kOk;
}

}  // namespace edgefl
