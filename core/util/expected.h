// expected.h - a value or an error, the project's one way to return both.
//
// Why not std::expected: GCC 12 has it, but the fuzzers are built with Debian's clang 14,
// whose concepts support is too old for libstdc++'s <expected>. This is the small subset of
// the std::expected interface the project uses, so moving to the standard type later is a
// search-and-replace.
#pragma once

#include <utility>
#include <variant>

namespace rdma_interop {

template <class E>
struct Unexpected {
  E error;
};

// Builds the error alternative: `return unexpected(WireError::kMpaBadKey);`
template <class E>
Unexpected<E> unexpected(E e) {
  return Unexpected<E>{std::move(e)};
}

template <class T, class E>
class Expected {
 public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Expected(Unexpected<E> u) : v_(std::in_place_index<1>, std::move(u.error)) {}  // NOLINT

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  // Precondition: has_value(). Checked by std::get (throws std::bad_variant_access).
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // Precondition: !has_value().
  const E& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, E> v_;
};

}  // namespace rdma_interop
