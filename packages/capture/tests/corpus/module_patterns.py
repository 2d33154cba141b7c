"""How model code uses ``torch.nn`` itself: torch's own transformer layers, keyword
filtering by signature, ``get_submodule``, modality ``ModuleDict``s over an input dict,
pre- and post-norm chosen by config, NamedTuple outputs, identity placeholders of pruned
layers, a recursive tree module, parameter lists and dicts, parameters flattened to a
vector, custom autograd functions (straight-through rounding, gradient reversal),
checkpointing in training, frozen pretrained embeddings, bilinear interactions,
MobileNet blocks, a GAN generator and a spectral-normed discriminator."""

import inspect
from typing import NamedTuple

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn
from torch.utils.checkpoint import checkpoint

PROGRAMS, case = registry()


torch.manual_seed(45)
D = 8


ENCODER_LAYER = nn.TransformerEncoderLayer(D, 2, dim_feedforward=16, dropout=0.0, batch_first=True)


@case(
    lambda n: (
        ENCODER_LAYER,
        torch.randn(2, n, D),
        torch.arange(n)[None].expand(2, n) >= torch.tensor([[n], [n - 1]]),
    )
)
def torch_transformer_encoder_layer_with_padding(layer, x, padding_mask):
    return layer(x, src_key_padding_mask=padding_mask)


DECODER_LAYER = nn.TransformerDecoderLayer(
    D, 2, dim_feedforward=16, dropout=0.0, batch_first=True, norm_first=True
)


@case(lambda n: (DECODER_LAYER, torch.randn(2, n, D), torch.randn(2, 3, D)))
def torch_transformer_decoder_layer_causal(layer, tgt, memory):
    mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
    return layer(tgt, memory, tgt_mask=mask, tgt_is_causal=True)


class FilteringWrapper(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self._accepted = set(inspect.signature(inner.forward).parameters)

    def forward(self, x, **kwargs):
        accepted = {key: value for key, value in kwargs.items() if key in self._accepted}
        return self.inner(x, **accepted), sorted(set(kwargs) - set(accepted))


class Scaled(nn.Module):
    def forward(self, x, scale=1.0, shift=None):
        return x * scale + (0 if shift is None else shift)


FILTERING = FilteringWrapper(Scaled())


@case(lambda n: (FILTERING, torch.randn(n, D)))
def keyword_arguments_filtered_by_signature(wrapper, x):
    return wrapper(x, scale=2.0, output_attentions=True, shift=x.mean(), return_dict=False)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.Sequential(
            nn.Sequential(nn.Linear(D, D), nn.ReLU()),
            nn.Sequential(nn.Linear(D, D), nn.Tanh()),
        )
        self.head = nn.Linear(D, 2)


BACKBONE = Backbone()


@case(lambda n: (BACKBONE, torch.randn(n, D)))
def get_submodule_by_dotted_name(model, x):
    features = model.get_submodule("stages.1.0")(model.get_submodule("stages.0")(x))
    return model.head(features), model.get_submodule("stages.1.1").__class__.__name__


class MultiModal(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoders = nn.ModuleDict(
            {"text": nn.Linear(6, D), "image": nn.Linear(12, D), "audio": nn.Linear(4, D)}
        )
        self.fusion = nn.Linear(D, D)

    def forward(self, inputs):
        encoded = {
            name: self.encoders[name](value)
            for name, value in inputs.items()
            if name in self.encoders
        }
        fused = torch.stack(list(encoded.values())).mean(0)
        return self.fusion(fused), list(encoded)


MULTIMODAL = MultiModal()


@case(
    lambda n: (
        MULTIMODAL,
        {"image": torch.randn(n, 12), "text": torch.randn(n, 6), "depth": torch.randn(n, 3)},
    )
)
def modality_encoders_over_an_input_dict(model, inputs):
    return model(inputs)


class Block(nn.Module):
    def __init__(self, pre_norm):
        super().__init__()
        self.pre_norm = pre_norm
        self.norm = nn.LayerNorm(D)
        self.ff = nn.Linear(D, D)

    def forward(self, x):
        if self.pre_norm:
            return x + self.ff(self.norm(x))
        return self.norm(x + self.ff(x))


PRE_POST = nn.Sequential(Block(True), Block(False))


@case(lambda n: (PRE_POST, torch.randn(2, n, D)))
def pre_and_post_norm_blocks_by_config(blocks, x):
    return blocks(x)


class DetectorOutput(NamedTuple):
    boxes: torch.Tensor
    scores: torch.Tensor
    aux: dict


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.box = nn.Linear(D, 4)
        self.score = nn.Linear(D, 1)

    def forward(self, x):
        return DetectorOutput(
            self.box(x).sigmoid(), self.score(x).squeeze(-1), {"features": x.mean(0)}
        )


DETECTOR = Detector()


@case(lambda n: (DETECTOR, torch.randn(n, D)))
def namedtuple_outputs_unpacked_and_replaced(model, x):
    out = model(x)
    boxes, scores, _ = out
    out = out._replace(scores=scores.sigmoid())
    return out, boxes.shape, out.aux["features"]


PRUNED = nn.Sequential(nn.Linear(D, D), nn.Identity(), nn.ReLU(), nn.Identity(), nn.Linear(D, 2))


@case(lambda n: (PRUNED, torch.randn(n, D)))
def identity_placeholders_of_pruned_layers(model, x):
    kept = [m for m in model if not isinstance(m, nn.Identity)]
    return model(x), len(kept)


class TreeNode(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.combine = nn.Linear(2 * D, D)
        self.children_ = (
            nn.ModuleList([TreeNode(depth - 1), TreeNode(depth - 1)]) if depth > 0 else None
        )

    def forward(self, leaves):
        if self.children_ is None:
            return leaves[0]
        half = len(leaves) // 2
        left = self.children_[0](leaves[:half])
        right = self.children_[1](leaves[half:])
        return torch.tanh(self.combine(torch.cat([left, right], -1)))


TREE = TreeNode(2)


@case(lambda n: (TREE, [torch.randn(n, D) for _ in range(4)]))
def recursive_tree_module_over_leaves(tree, leaves):
    return tree(leaves)


class Mixture(nn.Module):
    def __init__(self):
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(torch.randn(D)) for _ in range(3)])
        self.biases = nn.ParameterDict(
            {"a": nn.Parameter(torch.zeros(D)), "b": nn.Parameter(torch.ones(D))}
        )

    def forward(self, x):
        for scale in self.scales:
            x = x * scale.sigmoid()
        return x + self.biases["a"] + self.biases["b"], len(self.scales), list(self.biases.keys())


MIXTURE = Mixture()


@case(lambda n: (MIXTURE, torch.randn(n, D)))
def parameter_list_and_dict(model, x):
    return model(x)


@case(lambda n: (BACKBONE, torch.randn(n, D)))
def parameters_flattened_to_a_vector(model, x):
    vector = nn.utils.parameters_to_vector(model.parameters())
    return model.head(x).sum() + vector.norm(), vector.numel()


class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


class GradientReversal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.alpha, None


# known capture limitation: a custom torch.autograd.Function's apply is a graph break
# (it asks torch._C._are_functorch_transforms_active, and its backward is Python)
@case(lambda n: (torch.randn(n, D, requires_grad=True),), expect="any")
def custom_autograd_functions_ste_and_reversal(x):
    quantised = RoundSTE.apply(x * 4) / 4
    reversed_ = GradientReversal.apply(x, 0.5)
    return quantised, reversed_ * 2


CHECKPOINTED = nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, D))


@case(lambda n: (CHECKPOINTED, torch.randn(n, D, requires_grad=True)))
def checkpoint_in_training_non_reentrant(block, x):
    return checkpoint(block, x, use_reentrant=False) + x


PRETRAINED = nn.Embedding.from_pretrained(torch.randn(20, D), freeze=True, padding_idx=0)


@case(lambda n: (PRETRAINED, torch.randint(0, 20, (2, n))))
def frozen_pretrained_embedding(embedding, ids):
    out = embedding(ids)
    return out, out.requires_grad, F.embedding(ids, embedding.weight, padding_idx=0).sum()


BILINEAR = nn.Bilinear(D, 6, 3)


@case(lambda n: (BILINEAR, torch.randn(n, D), torch.randn(n, 6)))
def bilinear_interaction_scores(bilinear, user, item):
    return bilinear(user, item).log_softmax(-1)


class InvertedResidual(nn.Module):
    def __init__(self, cin, expand, cout, stride):
        super().__init__()
        hidden = cin * expand
        self.use_res_connect = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.Hardswish(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.Hardswish(),
        )
        self.se_reduce = nn.Conv2d(hidden, 4, 1)
        self.se_expand = nn.Conv2d(4, hidden, 1)
        self.project = nn.Sequential(nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = self.block(x)
        scale = F.hardsigmoid(self.se_expand(F.relu(self.se_reduce(F.adaptive_avg_pool2d(h, 1)))))
        out = self.project(h * scale)
        return x + out if self.use_res_connect else out


MOBILE = nn.Sequential(InvertedResidual(4, 2, 4, 1), InvertedResidual(4, 2, 6, 2)).eval()


@case(lambda n: (MOBILE, torch.randn(2, 4, 2 * n, 2 * n)))
def mobilenet_v3_inverted_residuals(blocks, x):
    return blocks(x)


GENERATOR = nn.Sequential(
    nn.ConvTranspose2d(D, 6, 4, 2, 1, bias=False),
    nn.BatchNorm2d(6),
    nn.PReLU(),
    nn.Upsample(scale_factor=2, mode="nearest"),
    nn.Conv2d(6, 3, 3, padding=1),
    nn.Tanh(),
).eval()


@case(lambda n: (GENERATOR, torch.randn(2, D, n, n)))
def gan_generator_transposed_conv_and_upsample(generator, z):
    return generator(z)


DISCRIMINATOR = nn.Sequential(
    nn.utils.parametrizations.spectral_norm(nn.Conv2d(3, 4, 3, 2, 1)),
    nn.LeakyReLU(0.2),
    nn.Flatten(),
).eval()


@case(lambda n: (DISCRIMINATOR, torch.randn(2, 3, 2 * n, 2 * n)))
def spectral_norm_parametrized_discriminator_eval(disc, images):
    return disc(images).mean(-1)


@case(
    lambda n: (
        nn.Softplus(beta=2.0, threshold=10.0),
        nn.Mish(),
        nn.CELU(0.5),
        torch.randn(n, D) * 6,
    )
)
def activation_modules_with_parameters_of_their_own(softplus, mish, celu, x):
    return softplus(x) + mish(x) + celu(x)
