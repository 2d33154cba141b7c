"""Pre- and post-processing that model code does on tensors: collators padding labels to
a multiple, packed-sequence masks from position ids, special-token masks, word-level
pooling from word ids, long-input windows averaged back, image and audio feature
extraction (log-mel with Whisper's clamp, pre-emphasis, STFT magnitudes, overlap-add),
detection and mask post-processing, multimodal merges of image features into text
embeddings, tubelet video embeddings with factorised attention, and statistics pooling."""

import math

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(44)
D = 8


@case(lambda n: ([torch.randint(0, 20, (k + 2,)) for k in range(n)],))
def seq2seq_collator_pads_labels_to_multiple(labels_list):
    pad_to_multiple_of, label_pad_token_id = 4, -100
    max_length = max(len(lab) for lab in labels_list)
    max_length = math.ceil(max_length / pad_to_multiple_of) * pad_to_multiple_of
    padded = [
        F.pad(lab, (0, max_length - len(lab)), value=label_pad_token_id) for lab in labels_list
    ]
    labels = torch.stack(padded)
    decoder_input_ids = torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1]], dim=1)
    return labels, decoder_input_ids.masked_fill(decoder_input_ids == -100, 1)


@case(lambda n: (torch.cat([torch.arange(n), torch.arange(3), torch.arange(2)])[None],))
def packed_sequence_mask_from_position_ids(position_ids):
    doc_ids = (position_ids == 0).cumsum(-1)
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    length = position_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mask = same_doc & causal
    lengths = F.one_hot(doc_ids[0] - 1, length).sum(0)
    return mask, doc_ids, lengths


@case(lambda n: (torch.randint(0, 30, (2, n + 2)), torch.tensor([0, 1, 2, 3])))
def special_tokens_mask_with_isin(input_ids, special_ids):
    special = torch.isin(input_ids, special_ids)
    maskable = ~special
    return special.long(), maskable.sum(-1)


@case(
    lambda n: (
        torch.randn(2 * n + 1, D),
        [None, 0, 0, 1, 2, 2, 2, *range(3, 3 + 2 * n - 6), None][: 2 * n + 1],
    )
)
def first_subtoken_word_pooling_from_word_ids(hidden, word_ids):
    first_positions = []
    previous = None
    for index, word in enumerate(word_ids):
        if word is not None and word != previous:
            first_positions.append(index)
        previous = word
    index = torch.tensor(first_positions)
    return hidden.index_select(0, index), len(first_positions)


@case(lambda n: (nn.Linear(D, 3), torch.randn(1, 6 * n, D)))
def long_input_windows_averaged_back(head, x):
    window, stride = 8, 4
    length = x.shape[1]
    summed = torch.zeros(1, length, 3)
    counts = torch.zeros(1, length, 1)
    for start in range(0, max(length - window, 0) + 1, stride):
        summed[:, start : start + window] += head(x[:, start : start + window])
        counts[:, start : start + window] += 1
    return summed / counts.clamp(min=1)


@case(lambda n: (torch.rand(2, 3, 4 * n + 2, 4 * n), (8, 8)))
def image_processor_rescale_center_crop_normalise(images, crop_size):
    images = images * 255.0
    images = images * (1 / 255.0)
    h, w = images.shape[-2:]
    top = (h - crop_size[0]) // 2
    left = (w - crop_size[1]) // 2
    images = images[..., top : top + crop_size[0], left : left + crop_size[1]]
    mean = torch.tensor([0.5, 0.5, 0.5])[:, None, None]
    std = torch.tensor([0.5, 0.5, 0.5])[:, None, None]
    return (images - mean) / std


@case(lambda n: (torch.randn(2, 64 * n), torch.rand(10, 17)))
def whisper_log_mel_with_dynamic_clamp(waveform, mel_filters):
    n_fft, hop = 32, 16
    window = torch.hann_window(n_fft)
    stft = torch.stft(waveform, n_fft, hop, window=window, return_complex=True)
    magnitudes = stft[..., :-1].abs() ** 2
    mel_spec = mel_filters @ magnitudes
    log_spec = torch.clamp(mel_spec, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.amax(dim=(-2, -1), keepdim=True) - 8.0)
    return (log_spec + 4.0) / 4.0


@case(lambda n: (torch.randn(2, 16 * n),))
def pre_emphasis_and_frame_energy(waveform):
    emphasized = torch.cat([waveform[:, :1], waveform[:, 1:] - 0.97 * waveform[:, :-1]], dim=1)
    frames = emphasized.unfold(-1, 8, 4)
    energy = frames.pow(2).sum(-1).clamp(min=1e-10).log()
    return emphasized, energy


@case(lambda n: (torch.randn(2, 8, 2 * n),))
def overlap_add_frames_with_fold(frames):
    frame_length, hop = 8, 4
    num_frames = frames.shape[-1]
    output_size = (num_frames - 1) * hop + frame_length
    signal = F.fold(
        frames, output_size=(1, output_size), kernel_size=(1, frame_length), stride=(1, hop)
    )
    window_sum = F.fold(
        torch.ones_like(frames),
        output_size=(1, output_size),
        kernel_size=(1, frame_length),
        stride=(1, hop),
    )
    return (signal / window_sum.clamp(min=1e-8)).flatten(1)


@case(
    lambda n: (
        torch.randn(2, 3 * n, 5),
        torch.rand(2, 3 * n, 4),
        torch.tensor([[32, 48], [64, 64]]),
    )
)
def detection_post_process_top_k_over_queries(logits, boxes, target_sizes):
    num_top = 5
    prob = logits.sigmoid()
    topk_values, topk_indexes = torch.topk(prob.view(logits.shape[0], -1), num_top, dim=1)
    scores = topk_values
    topk_boxes = torch.div(topk_indexes, logits.shape[2], rounding_mode="floor")
    labels = topk_indexes % logits.shape[2]
    cx, cy, w, h = boxes.unbind(-1)
    xyxy = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)
    xyxy = torch.gather(xyxy, 1, topk_boxes.unsqueeze(-1).repeat(1, 1, 4))
    img_h, img_w = target_sizes.unbind(1)
    scale_fct = torch.stack([img_w, img_h, img_w, img_h], dim=1)
    return scores, labels, xyxy * scale_fct[:, None, :]


@case(lambda n: (torch.randn(2, 3, n, n), (4 * n, 4 * n)))
def mask_post_process_upsample_and_threshold(mask_logits, image_size):
    masks = F.interpolate(mask_logits, size=image_size, mode="bilinear", align_corners=False)
    binary = masks.sigmoid() > 0.5
    areas = binary.flatten(2).sum(-1)
    return binary, areas


@case(
    lambda n: (
        torch.randn(2, n + 3, D),
        torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]]),
        torch.randn(4, D),
    )
)
def merge_image_features_at_image_tokens(inputs_embeds, image_token_flags, image_features):
    # LLaVA: the image features replace the embeddings of the image tokens, in order
    is_image = torch.zeros(inputs_embeds.shape[:2], dtype=torch.bool)
    is_image[:, :4] = image_token_flags.bool()
    special_image_mask = is_image.unsqueeze(-1).expand_as(inputs_embeds)
    return inputs_embeds.masked_scatter(special_image_mask, image_features)


class TubeletEmbedding(nn.Module):
    def __init__(self, tubelet=2, patch=4):
        super().__init__()
        self.proj = nn.Conv3d(
            3, D, kernel_size=(tubelet, patch, patch), stride=(tubelet, patch, patch)
        )
        self.spatial = nn.Linear(D, D)
        self.temporal = nn.Linear(D, D)

    def forward(self, video):
        x = self.proj(video.permute(0, 2, 1, 3, 4))
        b, d, t, h, w = x.shape
        x = x.permute(0, 2, 3, 4, 1).reshape(b * t, h * w, d)
        x = x + (self.spatial(x).softmax(1) * x).sum(1, keepdim=True)
        x = x.reshape(b, t, h * w, d).transpose(1, 2).reshape(b * h * w, t, d)
        x = x + (self.temporal(x).softmax(1) * x).sum(1, keepdim=True)
        return x.reshape(b, h * w, t, d)


TUBELET = TubeletEmbedding()


@case(lambda n: (TUBELET, torch.randn(1, 4, 3, 4 * n, 8)))
def video_tubelets_with_factorised_attention(embed, video):
    return embed(video)


@case(lambda n: (torch.randn(2, 3 * n, D), nn.Linear(D, 1)))
def attentive_statistics_pooling(frames, attention):
    weights = attention(torch.tanh(frames)).softmax(dim=1)
    mean = (weights * frames).sum(1)
    variance = (weights * frames.pow(2)).sum(1) - mean.pow(2)
    std = variance.clamp(min=1e-5).sqrt()
    return torch.cat([mean, std], dim=-1)


@case(lambda n: (torch.randn(2, 3 * n, 5),))
def ctc_greedy_frame_changes_mask(log_probs):
    blank = 0
    pred = log_probs.argmax(-1)
    previous = F.pad(pred[:, :-1], (1, 0), value=-1)
    emit = (pred != previous) & (pred != blank)
    return pred, emit, emit.sum(-1)


@case(lambda n: (torch.randn(2, 5, n),))
def feature_resampled_to_fixed_length(features):
    target = 12
    resampled = F.interpolate(features, size=target, mode="linear", align_corners=False)
    return resampled, F.adaptive_max_pool1d(features, 3)


@case(lambda n: (torch.randint(0, 30, (2, 2 * n + 3)), [n, n + 1]))
def token_type_ids_for_sentence_pairs(input_ids, first_lengths):
    positions = torch.arange(input_ids.shape[1])
    boundaries = torch.tensor(first_lengths)[:, None] + 2  # [CLS] first [SEP]
    token_type_ids = (positions[None, :] >= boundaries).long()
    return token_type_ids, token_type_ids.sum(-1)


@case(lambda n: (torch.randn(2, 2 * n), torch.randn(2, 2 * n)))
def span_scores_with_max_answer_length(start_logits, end_logits):
    max_answer_length = 3
    scores = start_logits[:, :, None] + end_logits[:, None, :]
    length = scores.shape[-1]
    valid = torch.ones(length, length, dtype=torch.bool).triu() & ~torch.ones(
        length, length, dtype=torch.bool
    ).triu(max_answer_length)
    scores = scores.masked_fill(~valid, float("-inf"))
    best = scores.flatten(1).argmax(-1)
    return torch.stack([best // length, best % length], -1)
