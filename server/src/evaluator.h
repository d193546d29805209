// evaluator.h: server-side evaluation of the global model, as a seam. RoundManager calls its
// evaluator after every committed version (RoundOptions::evaluator); the built-in one measures a
// built-in model (edgefl/model.h) on the Fashion-MNIST test set. A deployment with its own model
// and data implements ModelEvaluator in the server library and hands it to RoundOptions.
#ifndef EDGEFL_SERVER_EVALUATOR_H_
#define EDGEFL_SERVER_EVALUATOR_H_

#include <stdint.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "edgefl/span.h"
#include "edgefl/status.h"
#include "edgefl/tensor_table.h"

namespace edgefl::server {

struct Evaluation {
  float accuracy = 0;  // in [0, 1]
  float loss = 0;      // mean loss per sample
  uint32_t samples = 0;
};

class ModelEvaluator {
 public:
  virtual ~ModelEvaluator() = default;
  // One line for the start log: what is evaluated on what ("cnn on 10000 Fashion-MNIST test images").
  virtual std::string describe() const = 0;
  // kOk if this evaluator can evaluate the model the federation trains (called once at start,
  // before any round); otherwise a status and a sentence in *error saying why, which stops the
  // server from starting (an evaluation that would never happen is not accepted silently).
  [[nodiscard]] virtual Status check_model(const std::vector<TensorDesc>& tensors,
                                           const std::string& model_spec, std::string* error) const = 0;
  // Evaluates the flat parameter vector (the tensors in table order). Called on the round
  // thread after each commit; it may take its time, but blocks the rounds while it runs.
  [[nodiscard]] virtual Status evaluate(Span<const float> model, Evaluation* out, std::string* error) = 0;
  // What a user must do to an input to evaluate the model the same way, for the model file's
  // __metadata__ ("edgefl.preprocessing"); "" if nothing.
  virtual std::string preprocessing() const { return ""; }
};

// The built-in evaluator: `model_spec` (mlp:784-...-10 or a cnn on 1x28x28 with 10 classes) on the
// first `samples` images of the Fashion-MNIST test set in `data_dir` ("" = the default directory,
// edgefl/data.h), normalised as the built-in trainer normalises its training data. Fails:
// kInvalidSpec with the reason (a model that is not built-in, or whose input or classes are not
// Fashion-MNIST's), kIoError (the test set is missing or unreadable).
[[nodiscard]] Status make_fashion_mnist_evaluator(const std::string& model_spec, const std::string& data_dir,
                                                  uint32_t samples, std::unique_ptr<ModelEvaluator>* out,
                                                  std::string* error);

// The preprocessing of the built-in trainer and evaluator for a Fashion-MNIST-shaped built-in model
// (mlp:784-...-10, cnn on 1x28x28 with 10 classes), in words for a model file's metadata; "" for
// any other model.
std::string fashion_mnist_preprocessing(const std::string& model_spec);

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_EVALUATOR_H_
