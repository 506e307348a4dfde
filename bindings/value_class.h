// value_class.h - binds a C++ value type (a plain struct that compares equal) once.
//
// The struct is the one definition (STYLE.md: "a value type is written once; bindings
// expose it"); Python gets it as it is, not a dataclass copied field by field:
//
//   ValueClass<cm::BacklogCounters>(m, "BacklogCounters", "What a listener's backlog ...")
//       .readonly("backlog", &BacklogCounters::backlog, "slots (the listen() argument)")
//       ...
//       .done();
//
// Each field is a def_readwrite (or def_readonly for a snapshot Python should not edit) with
// its header comment as the docstring. done() adds what every value has in Python:
//   - a constructor as a dataclass has, T(a, b=value, ...): fields by position in declaration
//     order or by keyword, every one optional (the C++ default); too many, a repeated or an
//     unknown one is a TypeError;
//   - == and != (the struct's operator==; without one, field by field), and no hash (but see
//     hashable() below);
//   - repr "T(a=1, b=2)", every field in declaration order;
//   - replace(**changes), a changed copy (dataclasses.replace for a bound type);
//   - _fields, the field names in order (for code that walks them: JSON, reports);
//   - pickling, as its fields in order.
// Fields the struct keeps in another unit (milliseconds as std::chrono, octets as a vector)
// are property()s (readonly_property() for a value Python should not edit) with a getter and
// a setter in Python's unit; they take part in all of the above like any other field.
// A value whose fields are all read-only is as a frozen dataclass: hashable() gives it the
// hash of its fields (so it can key a dict or sit in a set, as before it was bound).
#pragma once

#include <pybind11/pybind11.h>

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"

namespace rdma_interop::bindings {

template <class T>
class ValueClass {
 public:
  using Setter = std::function<void(T&, py::handle)>;

  ValueClass(py::handle scope, const char* name, const char* doc)
      : cls_(scope, name, doc), name_(name) {}

  // A field Python reads and writes.
  template <class M>
  ValueClass& field(const char* name, M T::*member, const char* doc = "") {
    cls_.def_readwrite(name, member, doc);
    return add(name, member);
  }

  // A field of a snapshot: Python reads it; only the constructor and replace() set it.
  template <class M>
  ValueClass& readonly(const char* name, M T::*member, const char* doc = "") {
    cls_.def_readonly(name, member, doc);
    return add(name, member);
  }

  // A field kept in another form in C++: get(const T&) and set(T&, V) in Python's.
  template <class Get, class Set>
  ValueClass& property(const char* name, Get get, Set set, const char* doc = "") {
    cls_.def_property(name, get, set, doc);
    return add_setter(name, set);
  }

  // The same for a snapshot: Python reads it; only the constructor and replace() set it.
  template <class Get, class Set>
  ValueClass& readonly_property(const char* name, Get get, Set set, const char* doc = "") {
    cls_.def_property_readonly(name, get, doc);
    return add_setter(name, set);
  }

  // Hashable by its fields (for a value whose fields are all read-only).
  ValueClass& hashable() {
    cls_.def("__hash__", [](py::handle self) {
      py::tuple values(py::len(self.attr("_fields")));
      std::size_t i = 0;
      for (auto field : self.attr("_fields")) values[i++] = self.attr(field);
      return py::hash(values);
    });
    return *this;
  }

  // The class, for methods and properties that are not fields (def, def_property_readonly).
  py::class_<T>& cls() { return cls_; }

  py::class_<T>& done() {
    auto fields = std::make_shared<std::vector<std::pair<std::string, Setter>>>(fields_);
    std::string name = name_;
    auto apply = [fields, name](T& value, const py::dict& changes) {
      for (const auto& [key, v] : changes) {
        auto field = py::cast<std::string>(key);
        bool found = false;
        for (const auto& [known, set] : *fields) {
          if (known == field) {
            try {
              set(value, v);
            } catch (const py::cast_error&) {
              throw py::type_error(name + "." + field + " cannot be " +
                                   py::cast<std::string>(py::repr(v)));
            }
            found = true;
            break;
          }
        }
        if (!found) {
          throw py::type_error(name + "() got an unexpected keyword argument '" + field + "'");
        }
      }
    };
    cls_.def(py::init([apply, fields, name](const py::args& positional, const py::kwargs& named) {
      if (positional.size() > fields->size()) {
        throw py::type_error(name + "() takes " + std::to_string(fields->size()) +
                             " positional arguments but " + std::to_string(positional.size()) +
                             " were given");
      }
      // Positional arguments name the first fields, as for a dataclass.
      py::dict all;
      for (std::size_t i = 0; i < positional.size(); ++i) {
        all[py::str((*fields)[i].first)] = positional[i];
      }
      for (const auto& [key, v] : named) {
        if (all.contains(key)) {
          throw py::type_error(name + "() got multiple values for argument '" +
                               py::cast<std::string>(key) + "'");
        }
        all[key] = v;
      }
      T value{};
      apply(value, all);
      return value;
    }));
    cls_.def(
        "replace",
        [apply](const T& self, const py::kwargs& changes) {
          T copy = self;
          apply(copy, changes);
          return copy;
        },
        "A copy with the given fields changed (as dataclasses.replace).");
    if constexpr (std::equality_comparable<T>) {
      cls_.def(
          "__eq__", [](const T& a, const T& b) { return a == b; }, py::is_operator());
      cls_.def(
          "__ne__", [](const T& a, const T& b) { return !(a == b); }, py::is_operator());
    } else {
      // No operator== in C++: equal when every field is, as dataclasses compare.
      cls_.def(
          "__eq__",
          [](py::handle a, py::handle b) {
            if (!py::isinstance(b, py::type::of(a))) return false;
            for (auto field : a.attr("_fields")) {
              if (!a.attr(field).equal(b.attr(field))) return false;
            }
            return true;
          },
          py::is_operator());
    }
    py::tuple names(fields->size());
    for (std::size_t i = 0; i < fields->size(); ++i) names[i] = py::str((*fields)[i].first);
    cls_.attr("_fields") = names;
    // Pickled as its type and its fields in order, which the constructor takes back (a value
    // crosses a process pool, or travels inside a pickled exception, as a dataclass did).
    cls_.def("__reduce__", [](py::handle self) {
      py::list values;
      for (auto field : self.attr("_fields")) values.append(self.attr(field));
      return py::make_tuple(py::type::of(self), py::tuple(values));
    });
    cls_.def("__repr__", [name](py::handle self) {
      std::string out = name + "(";
      bool first = true;
      for (auto field : self.attr("_fields")) {
        if (!first) out += ", ";
        first = false;
        out +=
            py::cast<std::string>(field) + "=" + py::cast<std::string>(py::repr(self.attr(field)));
      }
      return out + ")";
    });
    return cls_;
  }

 private:
  template <class Set>
  ValueClass& add_setter(const char* name, Set set) {
    // Held as an object: a py::cpp_function copied into the lambda would take pybind11's
    // Func&& constructor instead of its copy constructor.
    py::object setter = py::cpp_function(set);
    fields_.emplace_back(name, [setter](T& value, py::handle v) {
      setter(py::cast(&value, py::return_value_policy::reference), v);
    });
    return *this;
  }

  template <class M>
  ValueClass& add(const char* name, M T::*member) {
    fields_.emplace_back(name,
                         [member](T& value, py::handle v) { value.*member = py::cast<M>(v); });
    return *this;
  }

  py::class_<T> cls_;
  std::string name_;
  std::vector<std::pair<std::string, Setter>> fields_;
};

}  // namespace rdma_interop::bindings
