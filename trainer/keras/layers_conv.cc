// The convolution layers' factories.
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::keras {

void AddConvolutionLayers(LayerFactories* f) { (void)f; }

}  // namespace lockstep::trainer::keras
