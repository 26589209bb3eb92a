#pragma once
/// Typed physical quantities. Adding seconds to bytes does not compile; dividing
/// work by a rate gives time. Values are doubles in SI base units (bytes, seconds,
/// floating-point operations).

#include <compare>

namespace capsim {

/// A quantity of one physical dimension, tagged so that different dimensions do not mix.
template <class Tag>
struct Quantity {
  double value = 0.0;

  constexpr Quantity() = default;
  constexpr explicit Quantity(double v) : value(v) {}

  constexpr Quantity operator+(Quantity o) const { return Quantity(value + o.value); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(value - o.value); }
  constexpr Quantity& operator+=(Quantity o) {
    value += o.value;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    value -= o.value;
    return *this;
  }
  constexpr Quantity operator*(double k) const { return Quantity(value * k); }
  constexpr Quantity operator/(double k) const { return Quantity(value / k); }
  /// Ratio of two quantities of the same dimension: dimensionless.
  constexpr double operator/(Quantity o) const { return value / o.value; }
  constexpr auto operator<=>(const Quantity&) const = default;
};

template <class Tag>
constexpr Quantity<Tag> operator*(double k, Quantity<Tag> q) {
  return q * k;
}

struct BytesTag {};
struct SecondsTag {};
struct FlopsTag {};
struct FlopsPerSecondTag {};
struct BytesPerSecondTag {};

using Bytes = Quantity<BytesTag>;                    ///< bytes
using Seconds = Quantity<SecondsTag>;                ///< seconds
using Flops = Quantity<FlopsTag>;                    ///< floating-point operations
using FlopsPerSecond = Quantity<FlopsPerSecondTag>;  ///< FLOP/s
using BytesPerSecond = Quantity<BytesPerSecondTag>;  ///< B/s

constexpr Seconds operator/(Flops f, FlopsPerSecond r) { return Seconds(f.value / r.value); }
constexpr Seconds operator/(Bytes b, BytesPerSecond r) { return Seconds(b.value / r.value); }
constexpr Flops operator*(FlopsPerSecond r, Seconds t) { return Flops(r.value * t.value); }
constexpr Bytes operator*(BytesPerSecond r, Seconds t) { return Bytes(r.value * t.value); }

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  ///< bytes in a GiB
constexpr double kGB = 1e9;                        ///< bytes in a (decimal) GB

}  // namespace capsim
