// edgefl/dataset_trainer.h: the built-in LocalTrainer for edgefl::Client rounds (edgefl/client.h):
// SgdTrainer (edgefl/trainer.h) on samples of an in-memory Dataset (edgefl/data.h), as `edgefl
// client` and the examples use it. Library edgefl::dataset_trainer (it brings edgefl::data and so
// zlib); a device with its own training engine implements LocalTrainer and needs neither.
#ifndef EDGEFL_DATASET_TRAINER_H_
#define EDGEFL_DATASET_TRAINER_H_

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "edgefl/client.h"
#include "edgefl/data.h"
#include "edgefl/model.h"
#include "edgefl/trainer.h"

namespace edgefl {

// The built-in trainer: SgdTrainer (edgefl/trainer.h) on the samples `indices` of `data` (both
// must outlive it). Its workspace is allocated by prepare() and kept while the spec is unchanged.
class DatasetTrainer final : public LocalTrainer {
 public:
  DatasetTrainer(const Dataset* data, std::vector<uint32_t> indices);
  size_t memory_bytes(const RoundTask& task) const override;
  [[nodiscard]] Status prepare(const RoundTask& task) override;
  [[nodiscard]] Status fit(Span<const float> global, Span<float> delta, uint32_t* samples,
                           float* loss) override;
  size_t sample_count() const { return indices_.size(); }

 private:
  const Dataset* data_;
  std::vector<uint32_t> indices_;
  std::string spec_text_;
  ModelSpec spec_{};
  std::vector<uint8_t> workspace_;
  SgdTrainer trainer_;
};

}  // namespace edgefl

#endif  // EDGEFL_DATASET_TRAINER_H_
